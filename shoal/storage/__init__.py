"""Delta Lake tables per tenant and signal: commits, the one read view, coverage, import.

``TableStore(data_dir).open(tenant, table)`` (:mod:`shoal.storage.store`) gives a
:class:`~shoal.storage.table.Table`; every change to it is a
:class:`~shoal.storage.commit.Commit`, landed by the one loop in
:mod:`shoal.storage.log`. Readers see a tenant's tables through
:mod:`shoal.storage.reader`: a Delta version plus the rows not yet flushed
(:mod:`shoal.storage.view`). docs/storage.md has the layout on disk and the commit
protocol. The package imports nothing itself, so that a module of it loads only what
it uses (delta-rs only where a table is opened).
"""
