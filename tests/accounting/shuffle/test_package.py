"""The shuffle accounting package stays TensorFlow-free."""
import subprocess
import sys


def test_no_tensorflow_import():
  code = ("import sys; import tff_idp.accounting.shuffle as s; "
          "assert s.ApesLedger and s.population_bound; "
          "bad = [m for m in sys.modules if m.split('.')[0] in "
          "('tensorflow', 'tensorflow_federated', 'tensorflow_privacy')]; "
          "assert not bad, bad")
  subprocess.run([sys.executable, "-c", code], check=True)
