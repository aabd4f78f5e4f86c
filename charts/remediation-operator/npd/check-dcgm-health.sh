#!/bin/sh
# node-problem-detector custom plugin: is DCGM's health watch reporting a GPU failure?
# Exit codes are NPD's plugin contract: 0 healthy (DCGMHealthProblem=False), 1 problem
# (DCGMHealthProblem=True, reason DCGMHealthFailure), 2 unknown (condition Unknown). The
# first lines of stdout become the condition's message.
#
# DCGM health watches ("dcgmi health --set", NVIDIA DCGM user guide) persist in the host
# engine; setting them again is harmless. They need about a minute of samples before the
# first meaningful check. DCGM reports Healthy, Warning or Failure per group: a Warning is a
# non-fatal finding (the EKS agent publishes those as Events too), so only Failure is a fault.
set -u
host="${DCGM_HOST:-localhost}"
if ! command -v dcgmi >/dev/null 2>&1; then
  echo "dcgmi is not in this image: use an NPD image that has DCGM's dcgmi (docs/install.md)"
  exit 2
fi
if ! dcgmi health --host "$host" --set a >/dev/null 2>&1; then
  echo "cannot reach the DCGM host engine at $host"
  exit 2
fi
if ! out="$(dcgmi health --host "$host" --check 2>&1)"; then
  echo "dcgmi health --check failed: $(echo "$out" | head -n 1)"
  exit 2
fi
overall="$(echo "$out" | grep -m 1 "Overall Health")"
case "$overall" in
  *Fail*)
    # The rows after "Overall Health", table borders stripped, on one line: which GPU, which
    # subsystem and DCGM's explanation (NPD keeps the first max_output_length characters).
    echo "$out" | sed -n '/Overall Health/,$p' | grep -v -e '^+' -e 'Overall Health' \
      | sed -e 's/|//g' -e 's/  */ /g' -e 's/^ //' -e 's/ $//' | grep -v '^$' | head -n 6 \
      | tr '\n' ' '
    echo
    exit 1
    ;;
  *Healthy*|*Warn*)
    exit 0
    ;;
  *)
    echo "unexpected dcgmi health output: $(echo "$out" | head -n 1)"
    exit 2
    ;;
esac
