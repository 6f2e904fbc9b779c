"""Runs mutmut 3 (``make mutation``) with one change: nested decorated functions are mutated.

mutmut skips every decorated function, at any depth, because a decorated
*top-level* function cannot be given its trampoline safely. Our privacy code
builds its TensorFlow/TFF computations as decorated *inner* functions
(``@tf.function def local_update`` in rpdp/dp_sgd.py, the
``@tff.tensorflow.computation`` bodies of idp_fedavg/aggregators.py): the
noise, the clipping and the normalisation live there. An inner function is
re-created on every call of its (trampolined) outer function, so mutating its
body is safe; only the decorator expression itself stays unmutated (mutmut's
own rule for ``cst.Decorator`` nodes still applies). Without this, those bodies
would silently drop out of the mutation run.

Usage: python tools/mutmut_run.py run --max-children 2   (any mutmut command)
"""
from __future__ import annotations

import sys

import libcst as cst
from libcst.metadata import PositionProvider
from mutmut.mutation import file_mutation as fm

_original_skip = fm.MutationVisitor._skip_node_and_children


def _skip_node_and_children(self, node):  # pylint: disable=protected-access
  if isinstance(node, cst.FunctionDef) and node.decorators:
    outer = self.get_metadata(fm.OuterFunctionProvider, node, None)
    if outer is not None and outer is not node:  # nested in a mutated function
      position = self.get_metadata(PositionProvider, node, None)
      if position and position.start.line in self._ignored_node_lines:
        self.ignored_functions.add(node.name.value)
        return True
      return node.name.value in fm.NEVER_MUTATE_FUNCTION_NAMES
  return _original_skip(self, node)


fm.MutationVisitor._skip_node_and_children = _skip_node_and_children  # pylint: disable=protected-access

if __name__ == "__main__":
  from mutmut.__main__ import cli  # pylint: disable=g-import-not-at-top
  sys.argv[0] = "mutmut"
  cli()
