"""What operators read of the usage records: the analytics page's queries (`analytics`), the
request browser (`browse`) and the reconciliation command's check (`reconcile`).

The records themselves are written by the runtime floor (routing.runtime.usage)."""
