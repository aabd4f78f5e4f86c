"""The demo test runs `remediation-operator demo` as a user would: real sandbox process (API
emulator and emulated fleet) and real operator process over HTTP. Nothing is faked."""
