"""Object name rules of the real server: DNS subdomains, DNS labels and generateName.

A name the real server would reject must be rejected here too, or the operator could create
objects in tests that a cluster refuses (for example Remediation names derived from node names).
"""

from __future__ import annotations

import random
import re

from remediation_emulator.errors import Cause

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# k8s.io/apiserver/pkg/storage/names: five characters from an alphabet without vowels.
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_random = random.Random()

SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def generate(prefix: str) -> str:
    """generateName: the prefix (cut to leave room) plus five random characters."""
    base = prefix[: 63 - 5] if len(prefix) > 63 - 5 else prefix
    return base + "".join(_random.choice(_ALPHABET) for _ in range(5))


def check(name: str, *, label: bool) -> list[Cause]:
    """Causes for an invalid metadata.name (empty list when valid)."""
    causes = []
    limit = 63 if label else 253
    if len(name) > limit:
        causes.append(
            Cause(
                "FieldValueInvalid",
                f'Invalid value: "{name}": must be no more than {limit} characters',
                "metadata.name",
            )
        )
    pattern, message = (_LABEL, LABEL_MESSAGE) if label else (_SUBDOMAIN, SUBDOMAIN_MESSAGE)
    if not pattern.match(name):
        causes.append(
            Cause("FieldValueInvalid", f'Invalid value: "{name}": {message}', "metadata.name")
        )
    return causes
