"""tff_idp/engine/stock_keywords.py: stock TFF builder keywords, accepted or refused with the
reason (issue 51). The families' builders use these; their own tests build the processes."""
import pytest
import tensorflow_federated as tff

from tff_idp.engine import stock_keywords
from tff_idp.errors import ToolkitValueError


def test_driver_keywords_name_the_builder_they_belong_to():
  stock_keywords.refuse_driver_keywords("build_x", "build_x_driver", client_execution=None,
                                        parallel_clients=None)
  with pytest.raises(ToolkitValueError, match=(
      r"^build_x\(\) builds the native TFF process, whose clients always train as TFF client "
      r"computations; client_execution='tff' belongs to build_x_driver\(\)")):
    stock_keywords.refuse_driver_keywords("build_x", "build_x_driver", client_execution="tff")
  with pytest.raises(ToolkitValueError, match=r"parallel_clients=0 belongs to build_x_driver"):
    stock_keywords.refuse_driver_keywords("build_x", "build_x_driver", client_execution=None,
                                          parallel_clients=0)


def test_a_model_aggregator_is_refused_naming_what_it_would_replace():
  stock_keywords.refuse_model_aggregator("build_x", None, "the DP mean")
  with pytest.raises(ToolkitValueError, match=(
      r"^build_x\(model_aggregator=\.\.\.\) would replace the DP mean, which the privacy "
      r"accounting assumes: the printed ε would no longer hold")):
    stock_keywords.refuse_model_aggregator("build_x", tff.aggregators.MeanFactory(),
                                           "the DP mean")


def test_only_uniform_client_weighting_passes():
  stock_keywords.check_client_weighting("build_x", None)
  stock_keywords.check_client_weighting("build_x", tff.learning.ClientWeighting.UNIFORM)
  with pytest.raises(ToolkitValueError, match=r"^build_x\(client_weighting=.*NUM_EXAMPLES.*\): "
                     "the DP mean weights every sampled client equally"):
    stock_keywords.check_client_weighting("build_x", tff.learning.ClientWeighting.NUM_EXAMPLES)
  with pytest.raises(ToolkitValueError, match="weights every sampled client equally"):
    stock_keywords.check_client_weighting("build_x", lambda metrics: 1.0)  # a weighting fn


def test_a_metrics_aggregator_is_refused_with_the_familys_reason():
  stock_keywords.refuse_metrics_aggregator("build_x", None, "why")
  with pytest.raises(ToolkitValueError,
                     match=r"^build_x\(metrics_aggregator=\.\.\.\) is not supported: why\.$"):
    stock_keywords.refuse_metrics_aggregator("build_x", object(), "why")
