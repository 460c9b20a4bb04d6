"""The rules of the configuration's one validation, by what they validate.

The entry points are in routing.config.validation (`validate_document`,
`validate_key_controls`, the form field validators); this package holds the rules
they run, one module per section of the document.
"""
