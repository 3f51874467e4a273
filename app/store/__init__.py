"""The history store: events of the rollout recorded in SQL (SQLite by default, Postgres by URL).

The only package that touches SQLAlchemy. Modules: ``config`` (settings, default URL), ``tables``
(tables), ``engine`` (connections), ``rows`` (events -> rows), ``writer`` (the background batched
writer, an ``EventSink``), ``reader`` + ``prior`` (read API, the ``LengthPrior`` of
``context-prior``), ``migrate`` (alembic); its benchmark is ``lab.bench.store_writer``. Nothing is
imported here, so ``import app.store.config`` stays light.
"""
