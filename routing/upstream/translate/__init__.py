"""Translation between protocols, one module per (client protocol -> upstream protocol) direction.

docs/translation.md. `table.TRANSLATORS` is the one table of pairs; `shared` holds what two or more
translators share; the stream framing is routing.core.sse. Nothing here imports the dialects: a
dialect (routing.upstream.dialects) imports the translator of its upstream's protocol.
"""
