"""The only package that imports kopf: thin handlers that parse, call the engine and return."""
