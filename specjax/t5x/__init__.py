"""specjax inside T5X: a speculative EncoderDecoderModel (model.py), T5X's prediction
contract over specjax's decode (decoding.py), the draft's restore hook (restore.py) and gin
configs (configs/). Only model.py imports t5x; nothing else in specjax imports this
package."""
