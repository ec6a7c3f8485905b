"""The shipped alert rules: `promtool check rules` and `promtool test rules` (Prometheus's own
tool, Debian's prometheus package) must pass without a single error or warning."""
import shutil
import subprocess

from monsupport import PROMTOOL_BIN, RULES_DIR

RULES = RULES_DIR / "advlock-rules.yml"
TESTS = RULES_DIR / "advlock-rules.test.yml"
ALERTS = ["AdvlockLeasesExpiring", "AdvlockLeakedLock", "AdvlockIdleSessionLocksCleared", "AdvlockWaitersPilingUp", "AdvlockOldestWaitTooOld",
          "AdvlockTimeoutsRising", "AdvlockHiddenHolders", "AdvlockAdvisoryLocksFillLockTable",
          "AdvlockLockTableNearlyFull", "AdvlockLeaseTableNearlyFull", "AdvlockLabelTableNearlyFull",
          "AdvlockStatsTableNearlyFull", "AdvlockMetricsMissing"]


def promtool(*args):
    exe = shutil.which(PROMTOOL_BIN)
    assert exe, "promtool is missing: scripts/setup.sh installs Debian's prometheus package"
    # From the rules' directory: the test file names its rule file relative to it.
    return subprocess.run([exe, *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=120)


def test_check_rules():
    r = promtool("check", "rules", RULES.name)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert f"SUCCESS: {len(ALERTS)} rules found" in out, out
    assert "WARNING" not in out.upper(), out


def test_rule_unit_tests():
    r = promtool("test", "rules", TESTS.name)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "SUCCESS" in out and "FAILED" not in out, out


def test_every_alert_has_unit_tests():
    """Each alert is evaluated where it fires and where it must not (an empty exp_alerts)."""
    text = RULES.read_text()
    tests = TESTS.read_text()
    for alert in ALERTS:
        assert f"- alert: {alert}\n" in text, alert
        blocks = tests.split(f"alertname: {alert}\n")[1:]
        assert blocks, f"{alert} has no promtool test"
        fires = [b for b in blocks if b.lstrip().startswith("exp_alerts:\n")]
        silent = [b for b in blocks if b.lstrip().startswith("exp_alerts: []")]
        assert fires and silent, f"{alert}: needs a case where it fires and one where it does not"
    assert text.count("- alert: ") == len(ALERTS), "a new alert needs its unit tests here"
