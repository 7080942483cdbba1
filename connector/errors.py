"""One error tree for lakesink. Every message says what to do next."""


class LakesinkError(Exception):
    """Root of every error lakesink raises on purpose."""


class SetupError(LakesinkError):
    """The machine lacks something lakesink needs (Java, Maven, a free port, a broker that answers)."""


class ConfigError(LakesinkError):
    """The configuration is invalid; the message lists every problem."""

    def __init__(self, problems):
        if isinstance(problems, str):
            problems = [problems]
        self.problems = list(problems)
        super().__init__("invalid configuration:\n  - " + "\n  - ".join(self.problems))


class FencedError(LakesinkError):
    """A newer coordinator epoch owns the table; this coordinator must step down."""


class CommitError(LakesinkError):
    """A transaction could not be committed; the table and offsets are as they were before it.

    `permanent`: no retry can succeed (the table's schema, partitioning or protocol refuses the write, or lakesink's
    own records are missing). The commit recipe sets it from the cause (connector.table.failures); one raised
    without it is retried, within write.retry.timeout.ms."""

    def __init__(self, message: str, permanent: bool = False):
        super().__init__(message)
        self.permanent = permanent


class CommitAbandonedError(LakesinkError):
    """The coordinator gave up a transaction (a permanent CommitError, or transient ones for longer than
    write.retry.timeout.ms) and stops; nothing past the last commit is acknowledged anywhere."""


class ConstraintViolationError(CommitError):
    """A row breaks a rule of the table (CHECK, NOT NULL, a generated column) and errors.tolerance=none: the
    connector stops, naming the rule and the record; nothing of the txn was committed."""

    def __init__(self, message: str):
        super().__init__(message, permanent=True)


class RecordError(LakesinkError):
    """A record could not be converted (and errors.tolerance does not allow skipping it)."""


class ProtocolError(LakesinkError):
    """A control-topic message or the control topic itself is not what the protocol expects."""


class NameConflictError(LakesinkError):
    """Another connector of the same name, writing another table or from other topics, uses the same control
    topic: the two would take each other's messages as their own. Give each connector its own name."""


class OffsetOutOfRangeError(LakesinkError):
    """A committed offset is outside what its partition holds now, and offset.reset.policy=fail."""


class TopicRecreatedError(OffsetOutOfRangeError):
    """A source topic was deleted and created again (another Kafka topic id) since its offsets were committed, and
    offset.reset.policy=fail."""


class TableHistoryError(LakesinkError):
    """What the table's history says makes resuming from its committed offsets wrong: it was RESTOREd to a version
    before this connector's last commit (restore.policy=fail), or it holds another connector's rows of the same topics
    while this connector has no state in it (rename.policy=fail)."""
