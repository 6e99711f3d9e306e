"""``iobridge check``: grade any io-bridge backend over the wire.

:func:`~iobridge.conformance.check.http_checks.check_http` grades the HTTP surface level by
level (io-agent-protocol "Conformance Levels"); :func:`~iobridge.conformance.check.npamp_checks.
check_npamp` grades an N-PAMP peer against the eight NPAMP-MAP-AGUI §10 clauses. Both talk to
the backend only through its protocol (an import-linter contract keeps the server out), so
they grade anyone's backend the same way they grade iobridge's.
"""

from iobridge.conformance.check.report import Outcome, Report, Result

__all__ = ["Outcome", "Report", "Result"]
