"""The management API under /api/v1/ (docs/management-api.md): keys, orgs and agents, usage, breakers.

Django views (not the gateway's ASGI path): every call reads or writes the database
and none is on the request path, so Django's ORM, transactions and the configuration
history's recorder are the right tools, and /v1 stays free of them.
"""
