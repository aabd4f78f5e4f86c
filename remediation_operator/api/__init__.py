"""The custom resources as pydantic v2 models: the source of truth for the CRDs and their docs.

Also converts validated objects into the domain's values, with errors that name the field.
"""
