from django.apps import AppConfig


class RoutingConfig(AppConfig):
    name = "routing"
    verbose_name = "Routing and resilience"

    def ready(self) -> None:
        from routing.config import checks, reload  # noqa: F401  (registers checks and signals)
