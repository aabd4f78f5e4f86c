"""`python -m remediation_operator` is the same as the `remediation-operator` command."""

from remediation_operator.cli import main

raise SystemExit(main())
