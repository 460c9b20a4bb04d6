"""`manage.py create_operator USERNAME --org ORG [--org ORG2] [--group GROUP] [--password-stdin]`: a staff user
limited to the named orgs (docs/operations.md#org-scoped-staff); without --password-stdin the generated
password is printed once."""

from __future__ import annotations

import secrets
import sys
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from policies.models import OperatorScope, Org
from routing.ops import scope


class Command(BaseCommand):
    help = "Create a staff user who sees and manages only the named organisations."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--org", action="append", required=True, help="An organisation the operator may see (repeatable)."
        )
        parser.add_argument(
            "--group",
            action="append",
            help=f"A group to join for its permissions (repeatable; default: {scope.ORG_OPERATORS_GROUP!r}).",
        )
        parser.add_argument(
            "--password-stdin", action="store_true", help="Read the password from standard input's first line."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        username = options["username"].strip()
        users = get_user_model()
        if not username or users.objects.filter(username=username).exists():
            raise CommandError(
                f"user {username!r} exists (or the name is empty): change its orgs in the admin's operator scopes"
            )
        orgs = _orgs(options["org"])
        groups = _groups(options["group"])
        password = _password(options["password_stdin"], username)
        with transaction.atomic():
            user = users.objects.create_user(username=username, password=password, is_staff=True)
            user.groups.set(groups)
            OperatorScope.objects.create(user=user).orgs.set(orgs)
        names = ", ".join(o.name for o in orgs)
        self.stdout.write(
            f"Operator {username!r} (staff, groups: {', '.join(g.name for g in groups)}) sees organisations {names}."
        )
        if not options["password_stdin"]:
            self.stdout.write("Password (shown once; change it after the first sign-in):")
            self.stdout.write(password)


def _orgs(names: list[str]) -> list[Org]:
    wanted = sorted({n.strip() for n in names})
    orgs = list(Org.objects.filter(name__in=wanted).order_by("name"))
    missing = sorted(set(wanted) - {o.name for o in orgs})
    if missing:
        raise CommandError(f"no organisation named {', '.join(missing)}: manage.py export_config lists them")
    return orgs


def _groups(names: list[str] | None) -> list[Group]:
    if not names:
        return [scope.ensure_org_operators_group()]
    groups = list(Group.objects.filter(name__in=names))
    missing = sorted(set(names) - {g.name for g in groups})
    if missing:
        raise CommandError(f"no group named {', '.join(missing)}: create it in the admin first")
    return groups


def _password(from_stdin: bool, username: str) -> str:
    if not from_stdin:
        return secrets.token_urlsafe(18)
    password = sys.stdin.readline().rstrip("\r\n")
    try:
        validate_password(password, get_user_model()(username=username))
    except ValidationError as exc:
        raise CommandError("the password read from standard input: " + " ".join(exc.messages)) from None
    return password
