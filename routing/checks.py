"""System check: the routing configuration must validate (ids routing.E001…)."""
