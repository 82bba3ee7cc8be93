"""The PostgreSQL wire protocol front door, over :mod:`shoal.sql`'s tenant sessions.

:mod:`~shoal.pgwire.codec` is the pure message codec; :mod:`~shoal.pgwire.server`
the asyncio listener (TLS, authentication, cancel requests);
:mod:`~shoal.pgwire.session` the simple and extended query protocols.
"""
