"""Proposers (`specjax.core.proposal.Proposer`) that are not models (a draft model is one
through `specjax.core.model_proposer`):

- `copy`: copies from the input or the output so far (prompt lookup; trees of several
  earlier matches);
- `bigram`: a table of next tokens (chains; static and dynamic top-k trees);
- `hybrid`: the copy where it matches, a draft model elsewhere (chains).
"""
