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
    """A transaction could not be committed; the table and offsets are as they were before it."""


class ConstraintViolationError(CommitError):
    """A row breaks a rule of the table (CHECK, NOT NULL, a generated column) and errors.tolerance=none: the
    connector stops, naming the rule and the record; nothing of the txn was committed."""


class RecordError(LakesinkError):
    """A record could not be converted (and errors.tolerance does not allow skipping it)."""


class ProtocolError(LakesinkError):
    """A control-topic message or the control topic itself is not what the protocol expects."""


class OffsetOutOfRangeError(LakesinkError):
    """A committed offset is outside what its partition holds now, and offset.reset.policy=fail."""
