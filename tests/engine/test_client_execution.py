"""tff_idp.engine.client_execution: the one rule behind every family's client_execution="auto"."""
import subprocess
import sys

import pytest

from tff_idp.engine import client_execution


def test_default_parallel_clients_is_the_core_count_capped_at_four(monkeypatch):
  for cores, expected in [(1, 1), (2, 2), (16, 4), (None, 1)]:
    monkeypatch.setattr(client_execution.os, "cpu_count", lambda c=cores: c)
    assert client_execution.default_parallel_clients() == expected


@pytest.mark.parametrize("requested,parameters,canaries,expected", [
    ("auto", 28_298, False, "in_process"),
    ("auto", client_execution.IN_PROCESS_MIN_PARAMETERS, False, "in_process"),
    ("auto", client_execution.IN_PROCESS_MIN_PARAMETERS - 1, False, "tff"),
    ("auto", None, False, "in_process"),
    ("auto", 28_298, True, "tff"),
    ("tff", 28_298, False, "tff"),
    ("in_process", 610, False, "in_process"),
])
def test_auto_is_in_process_for_large_models_without_canaries(requested, parameters,
                                                             canaries, expected):
  assert client_execution.resolve_client_execution(requested, parameters, canaries) == expected


def test_bad_settings_are_refused_with_the_choices():
  with pytest.raises(ValueError, match="one of auto, tff, in_process"):
    client_execution.resolve_client_execution("gpu", 10)
  with pytest.raises(ValueError, match="whole number >= 1"):
    client_execution.check_parallel_clients(1.5)
  assert client_execution.check_parallel_clients(2.0) == 2


def test_imports_no_tensorflow():
  code = ("import sys, tff_idp.engine.client_execution; "
          "print(any(m.startswith('tensorflow') for m in sys.modules))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True).stdout
  assert out.strip() == "False"


@pytest.mark.parametrize("requested,parameters,canaries,expected", [
    ("auto", 610, False, "vectorized"),
    ("auto", 28_298, False, "vectorized"),
    ("auto", 610, True, "tff"),
    ("in_process", 610, False, "in_process"),
    ("tff", 610, False, "tff"),
    ("vectorized", None, False, "vectorized"),
])
def test_auto_vectorizes_where_the_family_serves_the_model(requested, parameters, canaries,
                                                           expected):
  """Issue 35: measured faster for the dense models at every cohort size benchmarked."""
  assert client_execution.resolve_client_execution(
      requested, parameters, canaries, vectorizable=True) == expected
