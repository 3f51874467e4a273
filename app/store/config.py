"""Store settings (pydantic: they cross YAML and Ray) and the default database URL."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.env import DATA_DIR_ENV, DATABASE_URL_ENV, data_dir, database_url


def default_url() -> str:
    """``$SEER_DATABASE_URL``, else a SQLite file ``seer.db`` in ``data_dir()``."""
    env = database_url()
    if env:
        return env
    return f"sqlite:///{data_dir() / 'seer.db'}"


def check_shared(config: StoreConfig) -> None:
    """On a Ray cluster of several nodes the store must be a database every node reaches: an
    enabled store with no URL (neither ``database_url`` nor ``$SEER_DATABASE_URL``) would fall
    back to a SQLite file on whichever node the scheduler runs, so it is refused (ValueError).
    An explicit ``sqlite:///PATH`` stays allowed (it says where)."""
    if config.enabled and not config.database_url and not database_url():
        raise ValueError(
            "store.database_url: on a Ray cluster the history store needs a database every "
            "node reaches; set store.database_url (postgresql+psycopg://USER@HOST:PORT/DB) or "
            f"${DATABASE_URL_ENV}, or store.enabled: false to record nothing (an explicit "
            "sqlite:///PATH keeps it on the scheduler's node)"
        )


def resolve_url(url: str | None) -> str:
    """``url`` when given, else ``default_url()``."""
    return url if url else default_url()


def check_url(url: str) -> str:
    """``url`` if it names a backend the store supports (sqlite, postgresql), else ValueError."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    backend = scheme.split("+", 1)[0]
    if backend not in ("sqlite", "postgresql"):
        raise ValueError(
            f"database URL {redact(url)!r}: backend {backend or '(none)'!r} not supported; "
            "use sqlite:///PATH or postgresql+psycopg://USER@HOST:PORT/DB"
        )
    return url


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs and errors)."""
    head, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    creds, _, host = rest.partition("@")
    user, colon, _ = creds.partition(":")
    return f"{head}://{user}{':***' if colon else ''}@{host}"


class WriterConfig(BaseModel):
    """The background writer's batching and backlog (bounds documented per field)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    queue_size: int = Field(
        100_000,
        ge=1,
        le=10_000_000,
        description="events waiting to be written; beyond it new events are dropped and counted",
    )
    batch_size: int = Field(
        1000, ge=1, le=100_000, description="most events written in one transaction"
    )
    retry_initial_s: float = Field(
        0.05, gt=0, le=60, description="first wait after a failed write (doubles each time)"
    )
    retry_max_s: float = Field(
        10.0, gt=0, le=3600, description="longest wait between retries of a failed write"
    )
    busy_timeout_s: float = Field(
        5.0, ge=0, le=600, description="SQLite: wait this long for a lock before failing a write"
    )
    connect_timeout_s: float = Field(
        5.0, gt=0, le=600, description="Postgres: give up connecting after this long"
    )
    bucket_s: float = Field(
        10.0, gt=0, le=86_400, description="acceptance samples are bucketed by this much time"
    )


class StoreConfig(BaseModel):
    """Whether and where the service records its history (the ``store`` section of the app
    config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        False,
        description="record jobs, groups, requests, acceptance and load; off: nothing is "
        "written and the context-prior policy runs without a prior",
    )
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL (sqlite:///PATH, postgresql+psycopg://...); None = "
        f"${DATABASE_URL_ENV}, else sqlite under ${DATA_DIR_ENV} (~/.local/share/seer/seer.db)",
    )
    apply_migrations_on_start: bool = Field(
        True, description="bring the schema to the newest revision when the service starts"
    )
    prior_limit: int = Field(
        16,
        ge=1,
        le=4096,
        description="context-prior: most recent recorded lengths of a prompt used as its prior",
    )
    prior_timeout_s: float = Field(
        2.0,
        gt=0,
        le=600,
        description="context-prior: a job waits at most this long for its prior (then none)",
    )
    writer: WriterConfig = Field(default_factory=WriterConfig)

    @field_validator("database_url")
    @classmethod
    def _supported(cls, v: str | None) -> str | None:
        return None if v is None else check_url(v)

    def url(self) -> str:
        """The database URL this config resolves to (see ``database_url``)."""
        return check_url(resolve_url(self.database_url))
