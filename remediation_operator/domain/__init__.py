"""The decision core: pure values and functions, no I/O, no clock, no framework.

Everything here takes `now` as an argument and returns values; the engine carries them out.
Only the standard library may be imported (checked by import-linter).
"""
