"""ShuffledPersonalizedMeanFactory: mean of randomized reports, then the APES / S-APES de-bias."""
import collections

import numpy as np
import pytest

tff = pytest.importorskip("tensorflow_federated")

from tff_idp.accounting.shuffle import clip_laplace_reference as ref  # pylint: disable=g-import-not-at-top
from tff_idp.errors import ToolkitValueError  # pylint: disable=g-import-not-at-top
from tff_idp.apes import aggregator, debias  # pylint: disable=g-import-not-at-top

pytestmark = pytest.mark.usefixtures("tff_runtime")

C = 0.1
EPS = [0.05, 0.5, 1.0]
REPORT_TYPE = collections.OrderedDict(
    kernel=tff.TensorType(np.float32, [4, 3]), bias=tff.TensorType(np.float32, [3]))
VALUE_TYPE = tff.to_type(collections.OrderedDict(ldp_report=REPORT_TYPE))
D = 15


def _reports(n, rng):
  return [collections.OrderedDict(ldp_report=collections.OrderedDict(
      kernel=rng.uniform(-C, C, (4, 3)).astype(np.float32),
      bias=rng.uniform(-C, C, 3).astype(np.float32))) for _ in range(n)]


def _flat(value):
  value = value.get("ldp_report", value)
  return np.concatenate([np.ravel(value["kernel"]), np.ravel(value["bias"])])


@pytest.mark.parametrize("debias", [True, False])
def test_plain_model_deltas_are_refused_at_creation(debias):
  """Privacy (issue 31 item 4): the analyzer never runs on unrandomized deltas.

  Bug caught: a factory that accepts any value structure, so a stock
  ``build_unweighted_fed_avg(model_aggregator=...)`` trains with no local
  randomizer (no privacy) and a de-bias that inflates the step.
  """
  factory = (aggregator.ShuffledPersonalizedMeanFactory(C, EPS) if debias
             else aggregator.plain_mean_factory())
  for plain in (tff.to_type(REPORT_TYPE),
                tff.to_type([tff.TensorType(np.float32, [4, 3]), tff.TensorType(np.float32, [3])]),
                tff.TensorType(np.float32, [3])):
    with pytest.raises(ToolkitValueError, match="build_apes_process"):
      factory.create(plain)


def test_type_signatures():
  process = aggregator.ShuffledPersonalizedMeanFactory(C, EPS).create(VALUE_TYPE)
  assert str(process.initialize.type_signature) == (
      "( -> <grid_u=float32[1001],grid_values=float32[1001]>@SERVER)")
  assert str(process.next.type_signature.result.result) == (
      "<kernel=float32[4,3],bias=float32[3]>@SERVER")
  assert str(process.next.type_signature.result.measurements) == (
      "<reports=int32,normalizer=float32,clamped_fraction=float32>@SERVER")
  plain = aggregator.ShuffledPersonalizedMeanFactory(debias=False).create(VALUE_TYPE)
  assert str(plain.initialize.type_signature) == "( -> <>@SERVER)"


def test_debiased_mean_matches_the_reference():
  rng = np.random.default_rng(0)
  # Reports around a biased mean: realistic Clip-Laplace averages are small.
  reports = _reports(6, rng)
  for r in reports:
    r["ldp_report"]["kernel"] *= 0.1
    r["ldp_report"]["bias"] *= 0.1
  process = aggregator.ShuffledPersonalizedMeanFactory(C, EPS).create(VALUE_TYPE)
  out = process.next(process.initialize(), reports)
  mean = np.mean([_flat(r) for r in reports], axis=0)
  want = ref.invert_averaged_mean(mean, *ref.debias_grid(EPS, C))
  np.testing.assert_allclose(_flat(out.result), want, atol=2e-6)
  assert out.measurements["reports"] == 6
  assert out.measurements["normalizer"] == 6.0
  assert out.measurements["clamped_fraction"] == 0.0


def test_calibration_vector_through_the_aggregator():
  process = aggregator.ShuffledPersonalizedMeanFactory(C, EPS).create(VALUE_TYPE)
  value = collections.OrderedDict(kernel=np.full((4, 3), 0.0056392044, np.float32),
                                  bias=np.array([-0.0056392044, 0.0, 1.0], np.float32))
  out = process.next(process.initialize(), [aggregator.as_report(value)] * 2)
  np.testing.assert_allclose(out.result["kernel"], 0.05, atol=1e-6)
  np.testing.assert_allclose(out.result["bias"], [-0.05, 0.0, C], atol=1e-6)
  assert out.measurements["clamped_fraction"] == pytest.approx(1 / D)


def test_out_of_range_means_clamp_without_sign_flip():
  process = aggregator.ShuffledPersonalizedMeanFactory(C, EPS).create(VALUE_TYPE)
  low = collections.OrderedDict(kernel=np.full((4, 3), -C, np.float32),
                                bias=np.full(3, -C, np.float32))
  out = process.next(process.initialize(), [aggregator.as_report(low)])
  np.testing.assert_allclose(_flat(out.result), -C)
  assert out.measurements["clamped_fraction"] == 1.0


def test_static_number_of_reports_and_plain_mean():
  rng = np.random.default_rng(1)
  reports = _reports(3, rng)
  total = np.sum([_flat(r) for r in reports], axis=0)
  plain = aggregator.ShuffledPersonalizedMeanFactory(debias=False, num_reports=5).create(VALUE_TYPE)
  out = plain.next(plain.initialize(), reports)
  np.testing.assert_allclose(_flat(out.result), total / 5, rtol=1e-6)
  assert out.measurements["reports"] == 3 and out.measurements["normalizer"] == 5.0
  counted = aggregator.plain_mean_factory().create(VALUE_TYPE)
  out = counted.next(counted.initialize(), reports)
  np.testing.assert_allclose(_flat(out.result), total / 3, rtol=1e-6)


def test_empty_round_gives_no_update():
  process = aggregator.ShuffledPersonalizedMeanFactory(C, EPS).create(VALUE_TYPE)
  out = process.next(process.initialize(), [])
  np.testing.assert_array_equal(_flat(out.result), np.zeros(D))
  assert out.measurements["reports"] == 0


def test_sparse_modes_on_values():
  """S-APES: "rescale" is the reference's division by n·b/d then Ē⁻¹ at ε_i/b;
  "threshold" inverts the thresholded expectation (debias module)."""
  rng = np.random.default_rng(2)
  keep = 5
  eps = [2.5, 5.0, 10.0]  # per-coordinate 0.5, 1, 2
  reports = _reports(4, rng)
  for r in reports:
    r["ldp_report"]["kernel"] *= 0.05
    r["ldp_report"]["bias"] *= 0.05
  mean = np.mean([_flat(r) for r in reports], axis=0)
  rescale = aggregator.ShuffledPersonalizedMeanFactory(
      C, eps, keep=keep, sparse_debias="rescale").create(VALUE_TYPE)
  out = rescale.next(rescale.initialize(), reports)
  want = ref.invert_averaged_mean(mean * D / keep,
                                  *ref.debias_grid(np.array(eps) / keep, C))
  np.testing.assert_allclose(_flat(out.result), want, atol=2e-6)
  default = aggregator.ShuffledPersonalizedMeanFactory(C, eps, keep=keep).create(VALUE_TYPE)
  np.testing.assert_allclose(_flat(default.next(default.initialize(), reports).result),
                             _flat(out.result), atol=0)  # the default is the exact "rescale"
  threshold = aggregator.ShuffledPersonalizedMeanFactory(
      C, eps, keep=keep, sparse_debias="threshold").create(VALUE_TYPE)
  out = threshold.next(threshold.initialize(), reports)
  grid = debias.build_grid(eps, C, keep=keep, dimension=D, sparse_debias="threshold")
  np.testing.assert_allclose(_flat(out.result), debias.invert(mean, *grid).numpy(), atol=1e-7)


def test_errors():
  factory = aggregator.ShuffledPersonalizedMeanFactory
  with pytest.raises(ToolkitValueError, match="epsilons"):
    factory(C)
  with pytest.raises(ToolkitValueError, match="clip"):
    factory(None, EPS)
  with pytest.raises(ToolkitValueError, match="clip"):
    factory(0.0, EPS)
  with pytest.raises(ToolkitValueError, match="epsilons"):
    factory(C, [0.5, -1.0])
  with pytest.raises(ToolkitValueError, match="keep"):
    factory(debias=False, keep=3)
  with pytest.raises(ToolkitValueError, match="keep"):
    factory(C, EPS, keep=0)
  with pytest.raises(ToolkitValueError, match="keep"):
    factory(C, EPS, keep=D + 1).create(VALUE_TYPE)
  with pytest.raises(ToolkitValueError, match="sparse_debias"):
    factory(C, EPS, keep=2, sparse_debias="nope")
  with pytest.raises(ToolkitValueError, match="num_reports"):
    factory(C, EPS, num_reports=0)
  with pytest.raises(ToolkitValueError, match="float32"):
    factory(C, EPS).create(tff.to_type(collections.OrderedDict(
        ldp_report=tff.TensorType(np.int32, [3]))))
