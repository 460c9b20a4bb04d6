"""The runtime floor's tests share the operate area's fixtures (a live two-link snapshot, a fresh channel layer)."""

from tests.ops.conftest import fresh_layer, plain_user, snapshot, staff_user, viewer_user  # noqa: F401
