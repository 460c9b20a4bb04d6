from django.apps import AppConfig


class RoutingConfig(AppConfig):
    name = "routing"
    verbose_name = "Routing and resilience"

    def ready(self) -> None:
        # reason: Django's app loading: checks and signals import the models, ready only once apps are loaded
        from routing.config import audit, checks, reload  # noqa: F401  (registers checks and signals)

        audit.connect()
