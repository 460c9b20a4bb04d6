"""The admin of policies, one module per model group, each registering its own admins on import.

- `orgs`: an org with its agents, policies and BYO credentials as inlines
- `org_children`: agents, policies and credentials on their own pages (search across orgs)
- `api_keys`: API keys, created through policies.keys.create_api_key and shown once
- `operators`: management tokens, operator scopes, and the User and Group admins
- `bounded`, `shown_once`: the org-bounds check of key and agent forms, and the show-once page

Every admin derives from routing.ops.admin_base.OrgScopedAdmin and says how its model
reaches an org (`org_path`), so an org-scoped operator sees only its orgs' rows.
"""

from policies.admin import api_keys, operators, org_children, orgs  # noqa: F401 - importing registers the admins
