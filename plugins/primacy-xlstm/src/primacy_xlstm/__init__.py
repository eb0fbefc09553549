"""primacy-xlstm: xLSTM (mLSTM and sLSTM blocks) as a primacy backbone, found as ``XLSTMBackbone``."""

from primacy_xlstm.backbone import XLSTMBackbone

__all__ = ["XLSTMBackbone"]
