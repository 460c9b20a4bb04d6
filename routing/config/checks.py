"""System check: the routing configuration in the database must validate.

`manage.py check` (and everything that runs the checks) reports each problem of
routing.config.validation as an Error with a stable id, one per rule family:

- routing.E001  structure: unknown keys, wrong types, missing fields, bad or duplicate names
- routing.E002  fallback chains: unknown or alias target, self-fallback, duplicate link,
                more than 8 links, fallback_chain on a deny policy
- routing.E003  capabilities: unknown capability name, capability mismatch along a chain
- routing.E004  malformed policy pattern (Go filepath.Match syntax)
- routing.E005  base URL not http(s) or without a host (providers, BYO credentials)
- routing.E006  bad value: dialect, timeouts, resilience numbers, fallback_on, actions
- routing.E007  aliases: unknown target, alias to alias, name clashing with a model id
- routing.E008  unknown reference: model provider, credential provider, agent default_model

- routing.E009  the configuration could not be read from the database (not a missing
                table): the table and the database's message

Before `migrate` the tables do not exist; the check then reports nothing (migrate runs
the checks itself and must not be stopped by them).
"""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.db import DatabaseError

from routing.config.db_errors import describe, schema_missing
from routing.config.document import document_from_db
from routing.config.validation import validate_document

READ_FAILED = "routing.E009"


@checks.register()
def check_routing_configuration(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        document = document_from_db()
    except DatabaseError as exc:
        if schema_missing(exc.error if hasattr(exc, "error") else exc):
            return []  # not migrated yet
        return [checks.Error(describe(exc), id=READ_FAILED)]
    return [
        checks.Error(
            f"{error.path}: {error.message}",
            hint="Fix it in the admin or in your configuration file and run import_config.",
            id=error.code,
        )
        for error in validate_document(document)
    ]
