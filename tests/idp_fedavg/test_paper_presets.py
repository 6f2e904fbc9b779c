"""The IDP-FedAvg paper's presets: the paper's defaults, Table I and its comparison table."""
from datasets import specs
from tff_idp.idp_fedavg import paper_presets


def test_defaults_are_the_papers():
  for name, p in paper_presets.PRESETS.items():
    assert (p.rounds, p.clients_per_round, p.local_epochs, p.batch_size) == (420, 30, 15, 128)
    assert (p.client_optimizer, p.client_learning_rate, p.server_learning_rate) == (
        "adam", 0.0005, 1.0)
    assert p.runs == ("nonprivate", "0-0-100", "34-43-23", "54-37-9", "100-0-0")
    assert specs.info(name).num_clients == {"fmnist": 3383, "cifar10": 500, "svhn": 725}[name]
  assert paper_presets.PRESETS["fmnist"].budgets == ("1", "2", "3")
  assert paper_presets.PRESETS["fmnist"].delta == 1e-5            # the paper's code
  for name in ("cifar10", "svhn"):
    assert paper_presets.PRESETS[name].budgets == ("10", "20", "30")
    assert paper_presets.PRESETS[name].delta == 1e-4
  assert paper_presets.ALDAGHRI["budgets"] == ("0.6", "inf", "inf")
  assert paper_presets.ALDAGHRI["runs"] == ("95-0-5",)
  # Table I as printed in the paper (SVHN has no non-i.i.d. column).
  assert paper_presets.TABLE_I[("fmnist", False)]["100-0-0"] == 90.7
  assert paper_presets.TABLE_I[("cifar10", True)]["nonprivate"] == 61.0
  assert ("svhn", False) not in paper_presets.TABLE_I


def test_paper_table_puts_measured_next_to_table_i():
  rows = [{"run": "nonprivate", "mean_accuracy": 0.5}, {"run": "95-0-5", "mean_accuracy": 0.8}]
  t = paper_presets.paper_table(paper_presets.PRESETS["cifar10"], "pachinko", rows)
  assert "| nonprivate | 50.0 | 44.2 |" in t and "| 95-0-5 | 80.0 | — |" in t
  t = paper_presets.paper_table(paper_presets.PRESETS["fmnist"], "natural", rows, "aldaghri")
  assert "| 95-0-5 | 80.0 | 90.8 |" in t


def test_training_defaults_are_the_presets_fields():
  p = paper_presets.PRESETS["svhn"]
  d = p.training_defaults()
  assert (d["budgets"], d["delta"], d["rounds"], d["clients_per_round"]) == (
      ("10", "20", "30"), 1e-4, 420, 30)
  assert (d["eval_every"], d["checkpoint_every"], d["max_rate"], d["accountant"]) == (
      10, 10, 1.0, "rdp")
