"""Independent privacy numbers for tests: dp-accounting directly, never tff_idp."""
import dp_accounting


def dp_epsilon(q, sigma, rounds, delta, accountant="rdp"):
  """ε of ``rounds`` Poisson(q)-subsampled Gaussian(σ) steps, fresh accountant."""
  acc = (dp_accounting.rdp.RdpAccountant() if accountant == "rdp"
         else dp_accounting.pld.PLDAccountant())
  acc.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)),
      rounds))
  return acc.get_epsilon(delta)
