"""AG-UI over N-PAMP: the server that carries the Backend's runs on Bridge streams, and a client.

The sans-IO protocol lives in :mod:`iobridge.npamp`; this package is the asyncio glue between
it and :class:`iobridge.app.Backend` (``server``) or an application (``client``). It imports
nothing of HTTP. See ``docs/npamp-agui.md``.
"""
