"""Record-level Poisson DP-SGD inside TFF client computations (rPDP-FL)."""
from tff_idp.rpdp.dp_sgd import build_local_dp_sgd
from tff_idp.rpdp.dp_sgd import clipped_gradient_sum
from tff_idp.rpdp.dp_sgd import poisson_record_mask
from tff_idp.rpdp.client_work import build_record_dp_client_work
from tff_idp.rpdp.client_work import build_rpdp_fedavg_process
from tff_idp.rpdp.client_work import record_dataset
