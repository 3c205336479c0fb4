"""qos-policy.conf: ibqos's block (a port-group per job, a qos-level per SL, match rules),
and a parser that reads the file as OpenSM does.

- :mod:`~ibqos.opensm.policy.model`: the policy as OpenSM holds it after the parse
  (:class:`Policy`, its port-groups, qos-levels, match rules and qos-ulps lines);
- :mod:`~ibqos.opensm.policy.lexer`: OpenSM's tokens (osm_qos_parser_l.l);
- :mod:`~ibqos.opensm.policy.reader` and :mod:`~ibqos.opensm.policy.parser`: OpenSM's
  grammar (osm_qos_parser_y.y), which stops at the first syntax error;
- :mod:`~ibqos.opensm.policy.render`: ibqos's block between its marker comments, always
  the last part of the file, and :func:`job_sls` to read it back.

Reference: docs/design.md §6.1, "qos-policy.conf".
"""

from ibqos.opensm.policy.lexer import Token, tokenize
from ibqos.opensm.policy.model import (
    Issue,
    MatchRule,
    Policy,
    PortGroup,
    QosLevel,
    Section,
    UlpRule,
    fold,
)
from ibqos.opensm.policy.parser import parse_policy
from ibqos.opensm.policy.render import (
    BEGIN_MARK,
    END_MARK,
    PolicyJob,
    job_ports,
    job_sls,
    render_policy,
    strip_policy,
)

__all__ = [
    "BEGIN_MARK",
    "END_MARK",
    "Issue",
    "MatchRule",
    "Policy",
    "PolicyJob",
    "PortGroup",
    "QosLevel",
    "Section",
    "Token",
    "UlpRule",
    "fold",
    "job_ports",
    "job_sls",
    "parse_policy",
    "render_policy",
    "strip_policy",
    "tokenize",
]
