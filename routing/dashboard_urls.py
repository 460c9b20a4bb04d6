"""Dashboard pages (staff only)."""

urlpatterns: list = []
