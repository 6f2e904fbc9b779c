"""Privacy accounting for tff_idp. Imports dp-accounting, numpy and scipy only."""
from tff_idp.accounting.exact import ACCOUNTANTS
from tff_idp.accounting.exact import epsilon
from tff_idp.accounting.client.sample import GroupCalibration
from tff_idp.accounting.client.sample import InfeasibleBudgetError
from tff_idp.accounting.client.sample import get_group_sampling_rates
from tff_idp.accounting.client.sample import get_noise
from tff_idp.accounting.client.sample import get_sample_rate
from tff_idp.accounting.validation import group_sizes_from_ratios
