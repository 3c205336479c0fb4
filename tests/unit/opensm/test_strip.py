"""Taking ibqos's lines out of OpenSM's files (``ibqos restore``), on public site files."""

from __future__ import annotations

from pathlib import Path

import pytest

from ibqos.errors import RenderError
from ibqos.opensm.conf import managed_keys, parse_conf, render_conf, strip_conf
from ibqos.opensm.policy import PolicyJob, parse_policy, render_policy, strip_policy

DATA = Path(__file__).parents[2] / "data" / "opensm"
#: site opensm.conf files ibqos may meet: commented, NVIDIA's full dump, a hand-written one
CONFS = ["golden/opensm.conf.in", "nvidia/opensm-full.conf", "nvidia/handwritten.conf"]
CONFS += ["reference-a2-opensm.conf"]
POLICIES = ["golden/qos-policy.conf.in", "reference-example.conf"]
TABLES = {"sl2vl": "0,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7", "vlarb_high": "0:0"}
TABLES |= {"vlarb_low": "0:64,1:64", "high_limit": "0"}
JOBS = [PolicyJob("7", 3, (0x2C90300000A01, 0x2C90300000A02), "app"), PolicyJob("8", 5, ())]


def values(types: tuple[str, ...]) -> dict[str, str]:
    keys = managed_keys(types)
    return {"qos": "TRUE"} | {k: TABLES[k.split("_", 2)[2]] for k in keys[1:]}


def test_the_golden_files_strip_back_to_the_site_files() -> None:
    golden = DATA / "golden"
    site = (golden / "opensm.conf.in").read_text()
    assert strip_conf((golden / "opensm.conf").read_text(), site) == site
    policy = (golden / "qos-policy.conf.in").read_text()
    assert strip_policy((golden / "qos-policy.conf").read_text()) == policy


@pytest.mark.parametrize("name", CONFS)
@pytest.mark.parametrize("types", [("ca", "swe"), ("ca", "swe", "sw2sw", "sw0", "rtr")])
def test_a_rendered_conf_strips_back_byte_for_byte(name: str, types: tuple[str, ...]) -> None:
    site = (DATA / name).read_text()
    rendered = render_conf(site, values(types))
    assert rendered != site
    assert strip_conf(rendered, site) == site
    assert strip_conf(render_conf(rendered, values(("ca",))), site) == site  # a plan later


@pytest.mark.parametrize("name", CONFS)
def test_the_admins_edits_since_stay(name: str) -> None:
    """Lines added and removed outside the block after ibqos's first write stay as they
    are now; the admin's own lines for ibqos's keys come back from the original."""
    site = (DATA / name).read_text()
    owned = set(managed_keys(("ca", "swe", "sw2sw", "sw0", "rtr")))
    lines = site.splitlines(keepends=True)

    def mine(line: str) -> bool:
        return any(k in owned for k in parse_conf(line))

    # an option line of the admin's, not next to a key ibqos manages (a file of nothing
    # but QoS keys has none: then only lines are added)
    gone = next(
        (
            line
            for i, line in enumerate(lines)
            if parse_conf(line) and not mine(line) and not mine("".join(lines[i + 1 : i + 2]))
        ),
        "\0",
    )

    def edit(text: str) -> str:
        return "# the admin, later\n" + text.replace(gone, "", 1) + "log_max_size 9\n"

    rendered = render_conf(site, values(("ca", "swe")))
    assert strip_conf(edit(rendered), site) == edit(site)


def test_an_admin_line_for_a_managed_key_outside_the_block_wins() -> None:
    """The admin set ``qos`` again outside the block: the original's line is not added."""
    site = "# site\nqos FALSE\nlog_max_size 0\n"
    rendered = render_conf(site, {"qos": "TRUE"})
    edited = rendered + "qos TRUE\n"  # a line render_conf would take into the block next
    assert strip_conf(edited, site) == "# site\nlog_max_size 0\nqos TRUE\n"


def test_without_an_original_only_the_block_goes() -> None:
    rendered = render_conf("a 1\nqos FALSE\nb 2", {"qos": "TRUE"})
    assert strip_conf(rendered) == "a 1\nb 2"  # the block was where qos was
    assert strip_conf("a 1\n") == "a 1\n"  # no block: as it is


def test_damaged_markers_are_refused() -> None:
    rendered = render_conf("a 1\n", {"qos": "TRUE"})
    with pytest.raises(RenderError, match="no end marker"):
        strip_conf(rendered.replace("# END ibqos managed keys\n", ""))
    policy = render_policy(None, JOBS)
    with pytest.raises(RenderError, match="end marker"):
        strip_policy(policy.replace("# BEGIN ibqos managed block", "# BEGIN"))


@pytest.mark.parametrize("name", POLICIES)
def test_a_rendered_policy_strips_back_to_the_admins_part(name: str) -> None:
    site = (DATA / name).read_text()
    rendered = render_policy(site, JOBS)
    out = strip_policy(rendered)
    assert out == (site if site.endswith("\n") else site + "\n")
    assert parse_policy(out).error is None
    # an admin's rule added above the block later stays; the block goes wherever it is
    later = "# added later\n" + rendered.replace("# BEGIN ibqos", "# site note\n# BEGIN ibqos")
    assert strip_policy(later) == "# added later\n" + out + "# site note\n"


def test_a_policy_ibqos_created_strips_to_nothing() -> None:
    assert strip_policy(render_policy(None, JOBS)) == ""
    assert strip_policy(render_policy(None, [])) == ""
