"""ibqos's checker for OpenSM's files: what OpenSM would reject, drop or misread.

Both files pass it before ibqos writes anything, and ``ibqos check-opensm FILE...`` runs it
for admins.  A finding is an **error** when OpenSM would drop or misread the file (the whole
policy, a line, a value), a **warning** when OpenSM accepts it but it is likely not what
was meant (OpenSM keeps the policy, and perhaps drops or never matches one rule).  Every
finding is one line, ``FILE:LINE: message`` (a whole-file finding names line 1).  Each
check cites the reference section or the OpenSM source it mirrors.

- :mod:`~ibqos.opensm.check.qos_policy`: qos-policy.conf (docs/design.md §6.1): the parse,
  what ``osm_qos_policy_validate`` rejects, and silent misreadings, partitions included;
- :mod:`~ibqos.opensm.check.opensm_conf`: opensm.conf (docs/design.md §6.2): the QoS
  options as ``osm_subn_parse_conf_file`` and ``qos_build_config`` read them;
- :mod:`~ibqos.opensm.check.findings`: :class:`Finding`, and the check of ibqos's block
  markers both files share;
- :mod:`~ibqos.opensm.check.files`: a file of either kind, for ``ibqos check-opensm``.

ibqos's own block must be delimited by exactly one begin and one end marker; anything else
(a marker deleted or edited by hand, two blocks) is a warning here (OpenSM ignores comments)
and a :class:`~ibqos.errors.RenderError` when ibqos renders (:func:`ibqos.opensm.conf.find_block`).
"""

from ibqos.opensm.check.files import Kind, check_file, detect_kind, partitions_file
from ibqos.opensm.check.findings import Finding
from ibqos.opensm.check.opensm_conf import check_conf
from ibqos.opensm.check.qos_policy import check_policy

__all__ = [
    "Finding",
    "Kind",
    "check_conf",
    "check_file",
    "check_policy",
    "detect_kind",
    "partitions_file",
]
