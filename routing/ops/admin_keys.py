"""The admin's write-only "stored API key" field (docs/security.md#secrets).

A key typed here is encrypted with SWITCHBOARD_FERNET_KEY and kept in the row's
`api_key_encrypted`; the input is a password field that never renders a value
back ("leave blank to keep"). Without a Fernet key the field is disabled and says
how to enable it. A model form gets both fields by listing `StoredKeyForm` first
among its bases; forms that save elsewhere call `setup_key_fields(self)` in
`__init__` and `apply_stored_key(self, instance)` before saving.
"""

from __future__ import annotations

from typing import Any

from django import forms

from routing.config.secrets import ENABLE_HINT, StoredKeyError, encrypt, fernet_configured


def key_field() -> forms.CharField:
    return forms.CharField(
        required=False,
        label="Stored API key",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )


def clear_field() -> forms.BooleanField:
    return forms.BooleanField(required=False, label="Remove the stored key")


def setup_key_fields(form: forms.BaseForm) -> None:
    """Say whether a key is stored (never which), or how to enable storing keys."""
    field, clear = form.fields.get("api_key"), form.fields.get("clear_api_key")
    if field is None:
        return
    stored = bool(getattr(form.instance, "api_key_encrypted", ""))  # type: ignore[attr-defined]
    if not fernet_configured():
        field.disabled = True
        field.help_text = f"Storing keys encrypted in the database is off: {ENABLE_HINT}."
        if clear is not None:
            clear.disabled = not stored
        return
    state = "A key is stored (encrypted)" if stored else "No key is stored"
    field.help_text = (
        f"{state}. Write-only: type a key to store it encrypted, leave blank to keep the stored one. "
        "A stored key is used instead of api_key_env."
    )
    if clear is not None and not stored:
        clear.disabled = True


def apply_stored_key(form: forms.BaseForm, instance: Any) -> None:
    """Encrypt a newly typed key into `instance.api_key_encrypted` (or clear it when asked)."""
    data = getattr(form, "cleaned_data", {}) or {}
    value = (data.get("api_key") or "").strip()
    if value:
        try:
            instance.api_key_encrypted = encrypt(value)
        except StoredKeyError as exc:  # pragma: no cover - the field is disabled without a Fernet key
            raise forms.ValidationError(str(exc)) from exc
    elif data.get("clear_api_key"):
        instance.api_key_encrypted = ""


class StoredKeyForm(forms.Form):
    """The stored-key fields for a model form: `class F(StoredKeyForm, forms.ModelForm)`."""

    api_key = key_field()
    clear_api_key = clear_field()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        setup_key_fields(self)

    def save(self, commit: bool = True) -> Any:
        apply_stored_key(self, self.instance)  # type: ignore[attr-defined]
        return super().save(commit)  # type: ignore[misc]
