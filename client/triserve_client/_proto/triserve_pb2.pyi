from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelChoice(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_CHOICE_AUTO: _ClassVar[ModelChoice]
    MODEL_CHOICE_PRIMARY: _ClassVar[ModelChoice]
    MODEL_CHOICE_FALLBACK: _ClassVar[ModelChoice]
MODEL_CHOICE_AUTO: ModelChoice
MODEL_CHOICE_PRIMARY: ModelChoice
MODEL_CHOICE_FALLBACK: ModelChoice

class ModelInfo(_message.Message):
    __slots__ = ("name", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class Timings(_message.Message):
    __slots__ = ("preprocess_ms", "queue_ms", "infer_ms", "postprocess_ms", "total_ms")
    PREPROCESS_MS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_MS_FIELD_NUMBER: _ClassVar[int]
    INFER_MS_FIELD_NUMBER: _ClassVar[int]
    POSTPROCESS_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    preprocess_ms: float
    queue_ms: float
    infer_ms: float
    postprocess_ms: float
    total_ms: float
    def __init__(self, preprocess_ms: _Optional[float] = ..., queue_ms: _Optional[float] = ..., infer_ms: _Optional[float] = ..., postprocess_ms: _Optional[float] = ..., total_ms: _Optional[float] = ...) -> None: ...

class DetectRequest(_message.Message):
    __slots__ = ("images", "conf_threshold", "iou_threshold", "max_detections", "class_aware", "model", "deployment")
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    CONF_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    IOU_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    MAX_DETECTIONS_FIELD_NUMBER: _ClassVar[int]
    CLASS_AWARE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    images: _containers.RepeatedScalarFieldContainer[bytes]
    conf_threshold: float
    iou_threshold: float
    max_detections: int
    class_aware: bool
    model: ModelChoice
    deployment: str
    def __init__(self, images: _Optional[_Iterable[bytes]] = ..., conf_threshold: _Optional[float] = ..., iou_threshold: _Optional[float] = ..., max_detections: _Optional[int] = ..., class_aware: _Optional[bool] = ..., model: _Optional[_Union[ModelChoice, str]] = ..., deployment: _Optional[str] = ...) -> None: ...

class Detection(_message.Message):
    __slots__ = ("box", "score", "class_id", "label")
    BOX_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    CLASS_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    box: _containers.RepeatedScalarFieldContainer[float]
    score: float
    class_id: int
    label: str
    def __init__(self, box: _Optional[_Iterable[float]] = ..., score: _Optional[float] = ..., class_id: _Optional[int] = ..., label: _Optional[str] = ...) -> None: ...

class ImageResult(_message.Message):
    __slots__ = ("width", "height", "detections", "candidates")
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    DETECTIONS_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    width: int
    height: int
    detections: _containers.RepeatedCompositeFieldContainer[Detection]
    candidates: int
    def __init__(self, width: _Optional[int] = ..., height: _Optional[int] = ..., detections: _Optional[_Iterable[_Union[Detection, _Mapping]]] = ..., candidates: _Optional[int] = ...) -> None: ...

class DetectResponse(_message.Message):
    __slots__ = ("request_id", "model", "deployment", "degraded", "degraded_reason", "timings", "results")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASON_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: ModelInfo
    deployment: str
    degraded: bool
    degraded_reason: str
    timings: Timings
    results: _containers.RepeatedCompositeFieldContainer[ImageResult]
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[_Union[ModelInfo, _Mapping]] = ..., deployment: _Optional[str] = ..., degraded: _Optional[bool] = ..., degraded_reason: _Optional[str] = ..., timings: _Optional[_Union[Timings, _Mapping]] = ..., results: _Optional[_Iterable[_Union[ImageResult, _Mapping]]] = ...) -> None: ...

class ClassifyRequest(_message.Message):
    __slots__ = ("texts", "top_k", "model", "deployment")
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    top_k: int
    model: ModelChoice
    deployment: str
    def __init__(self, texts: _Optional[_Iterable[str]] = ..., top_k: _Optional[int] = ..., model: _Optional[_Union[ModelChoice, str]] = ..., deployment: _Optional[str] = ...) -> None: ...

class LabelScore(_message.Message):
    __slots__ = ("label", "score")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    label: str
    score: float
    def __init__(self, label: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class TextResult(_message.Message):
    __slots__ = ("label", "score", "top_k", "tokens", "truncated", "chars")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    CHARS_FIELD_NUMBER: _ClassVar[int]
    label: str
    score: float
    top_k: _containers.RepeatedCompositeFieldContainer[LabelScore]
    tokens: int
    truncated: bool
    chars: int
    def __init__(self, label: _Optional[str] = ..., score: _Optional[float] = ..., top_k: _Optional[_Iterable[_Union[LabelScore, _Mapping]]] = ..., tokens: _Optional[int] = ..., truncated: _Optional[bool] = ..., chars: _Optional[int] = ...) -> None: ...

class ClassifyResponse(_message.Message):
    __slots__ = ("request_id", "model", "deployment", "degraded", "degraded_reason", "timings", "results")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASON_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: ModelInfo
    deployment: str
    degraded: bool
    degraded_reason: str
    timings: Timings
    results: _containers.RepeatedCompositeFieldContainer[TextResult]
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[_Union[ModelInfo, _Mapping]] = ..., deployment: _Optional[str] = ..., degraded: _Optional[bool] = ..., degraded_reason: _Optional[str] = ..., timings: _Optional[_Union[Timings, _Mapping]] = ..., results: _Optional[_Iterable[_Union[TextResult, _Mapping]]] = ...) -> None: ...

class ForecastRequest(_message.Message):
    __slots__ = ("values", "timestamps", "start", "frequency", "horizon", "model", "deployment", "covariates", "future_covariates", "calendar")
    class CovariatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Doubles
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Doubles, _Mapping]] = ...) -> None: ...
    class FutureCovariatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Doubles
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Doubles, _Mapping]] = ...) -> None: ...
    VALUES_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_FIELD_NUMBER: _ClassVar[int]
    HORIZON_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    COVARIATES_FIELD_NUMBER: _ClassVar[int]
    FUTURE_COVARIATES_FIELD_NUMBER: _ClassVar[int]
    CALENDAR_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    timestamps: _containers.RepeatedScalarFieldContainer[str]
    start: str
    frequency: str
    horizon: int
    model: ModelChoice
    deployment: str
    covariates: _containers.MessageMap[str, Doubles]
    future_covariates: _containers.MessageMap[str, Doubles]
    calendar: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[float]] = ..., timestamps: _Optional[_Iterable[str]] = ..., start: _Optional[str] = ..., frequency: _Optional[str] = ..., horizon: _Optional[int] = ..., model: _Optional[_Union[ModelChoice, str]] = ..., deployment: _Optional[str] = ..., covariates: _Optional[_Mapping[str, Doubles]] = ..., future_covariates: _Optional[_Mapping[str, Doubles]] = ..., calendar: _Optional[_Iterable[str]] = ...) -> None: ...

class Doubles(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class ForecastPoint(_message.Message):
    __slots__ = ("timestamp", "point", "lower_50", "upper_50", "lower_90", "upper_90", "quantiles")
    class QuantilesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    POINT_FIELD_NUMBER: _ClassVar[int]
    LOWER_50_FIELD_NUMBER: _ClassVar[int]
    UPPER_50_FIELD_NUMBER: _ClassVar[int]
    LOWER_90_FIELD_NUMBER: _ClassVar[int]
    UPPER_90_FIELD_NUMBER: _ClassVar[int]
    QUANTILES_FIELD_NUMBER: _ClassVar[int]
    timestamp: str
    point: float
    lower_50: float
    upper_50: float
    lower_90: float
    upper_90: float
    quantiles: _containers.ScalarMap[str, float]
    def __init__(self, timestamp: _Optional[str] = ..., point: _Optional[float] = ..., lower_50: _Optional[float] = ..., upper_50: _Optional[float] = ..., lower_90: _Optional[float] = ..., upper_90: _Optional[float] = ..., quantiles: _Optional[_Mapping[str, float]] = ...) -> None: ...

class InputReport(_message.Message):
    __slots__ = ("sorted", "duplicates_merged", "imputed", "points", "used", "frequency", "frequency_inferred", "padded", "method", "method_weights", "backtest_mase", "backtest_origins", "interval_calibration", "level_shift", "covariates", "static")
    class MethodWeightsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    SORTED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_MERGED_FIELD_NUMBER: _ClassVar[int]
    IMPUTED_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_INFERRED_FIELD_NUMBER: _ClassVar[int]
    PADDED_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    METHOD_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    BACKTEST_MASE_FIELD_NUMBER: _ClassVar[int]
    BACKTEST_ORIGINS_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_CALIBRATION_FIELD_NUMBER: _ClassVar[int]
    LEVEL_SHIFT_FIELD_NUMBER: _ClassVar[int]
    COVARIATES_FIELD_NUMBER: _ClassVar[int]
    STATIC_FIELD_NUMBER: _ClassVar[int]
    sorted: bool
    duplicates_merged: int
    imputed: int
    points: int
    used: int
    frequency: str
    frequency_inferred: bool
    padded: int
    method: str
    method_weights: _containers.ScalarMap[str, float]
    backtest_mase: float
    backtest_origins: int
    interval_calibration: str
    level_shift: LevelShift
    covariates: CovariateReport
    static: StaticReport
    def __init__(self, sorted: _Optional[bool] = ..., duplicates_merged: _Optional[int] = ..., imputed: _Optional[int] = ..., points: _Optional[int] = ..., used: _Optional[int] = ..., frequency: _Optional[str] = ..., frequency_inferred: _Optional[bool] = ..., padded: _Optional[int] = ..., method: _Optional[str] = ..., method_weights: _Optional[_Mapping[str, float]] = ..., backtest_mase: _Optional[float] = ..., backtest_origins: _Optional[int] = ..., interval_calibration: _Optional[str] = ..., level_shift: _Optional[_Union[LevelShift, _Mapping]] = ..., covariates: _Optional[_Union[CovariateReport, _Mapping]] = ..., static: _Optional[_Union[StaticReport, _Mapping]] = ...) -> None: ...

class StaticCategorical(_message.Message):
    __slots__ = ("name", "categories", "used", "backtest_error_own", "backtest_error_pooled")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CATEGORIES_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    BACKTEST_ERROR_OWN_FIELD_NUMBER: _ClassVar[int]
    BACKTEST_ERROR_POOLED_FIELD_NUMBER: _ClassVar[int]
    name: str
    categories: int
    used: bool
    backtest_error_own: float
    backtest_error_pooled: float
    def __init__(self, name: _Optional[str] = ..., categories: _Optional[int] = ..., used: _Optional[bool] = ..., backtest_error_own: _Optional[float] = ..., backtest_error_pooled: _Optional[float] = ...) -> None: ...

class StaticReport(_message.Message):
    __slots__ = ("used", "pooled_by", "series_in_category", "categoricals")
    USED_FIELD_NUMBER: _ClassVar[int]
    POOLED_BY_FIELD_NUMBER: _ClassVar[int]
    SERIES_IN_CATEGORY_FIELD_NUMBER: _ClassVar[int]
    CATEGORICALS_FIELD_NUMBER: _ClassVar[int]
    used: bool
    pooled_by: str
    series_in_category: int
    categoricals: _containers.RepeatedCompositeFieldContainer[StaticCategorical]
    def __init__(self, used: _Optional[bool] = ..., pooled_by: _Optional[str] = ..., series_in_category: _Optional[int] = ..., categoricals: _Optional[_Iterable[_Union[StaticCategorical, _Mapping]]] = ...) -> None: ...

class CovariateEffect(_message.Message):
    __slots__ = ("name", "effect", "t_value", "used")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    T_VALUE_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    name: str
    effect: float
    t_value: float
    used: bool
    def __init__(self, name: _Optional[str] = ..., effect: _Optional[float] = ..., t_value: _Optional[float] = ..., used: _Optional[bool] = ...) -> None: ...

class CovariateReport(_message.Message):
    __slots__ = ("used", "backtest_error_with", "backtest_error_without", "effects")
    USED_FIELD_NUMBER: _ClassVar[int]
    BACKTEST_ERROR_WITH_FIELD_NUMBER: _ClassVar[int]
    BACKTEST_ERROR_WITHOUT_FIELD_NUMBER: _ClassVar[int]
    EFFECTS_FIELD_NUMBER: _ClassVar[int]
    used: bool
    backtest_error_with: float
    backtest_error_without: float
    effects: _containers.RepeatedCompositeFieldContainer[CovariateEffect]
    def __init__(self, used: _Optional[bool] = ..., backtest_error_with: _Optional[float] = ..., backtest_error_without: _Optional[float] = ..., effects: _Optional[_Iterable[_Union[CovariateEffect, _Mapping]]] = ...) -> None: ...

class LevelShift(_message.Message):
    __slots__ = ("at", "size")
    AT_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    at: str
    size: float
    def __init__(self, at: _Optional[str] = ..., size: _Optional[float] = ...) -> None: ...

class ForecastResponse(_message.Message):
    __slots__ = ("request_id", "model", "deployment", "degraded", "degraded_reason", "timings", "forecast", "input")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASON_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    FORECAST_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: ModelInfo
    deployment: str
    degraded: bool
    degraded_reason: str
    timings: Timings
    forecast: _containers.RepeatedCompositeFieldContainer[ForecastPoint]
    input: InputReport
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[_Union[ModelInfo, _Mapping]] = ..., deployment: _Optional[str] = ..., degraded: _Optional[bool] = ..., degraded_reason: _Optional[str] = ..., timings: _Optional[_Union[Timings, _Mapping]] = ..., forecast: _Optional[_Iterable[_Union[ForecastPoint, _Mapping]]] = ..., input: _Optional[_Union[InputReport, _Mapping]] = ...) -> None: ...

class SeriesInput(_message.Message):
    __slots__ = ("id", "values", "timestamps", "start", "covariates", "future_covariates", "static")
    class CovariatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Doubles
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Doubles, _Mapping]] = ...) -> None: ...
    class FutureCovariatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Doubles
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Doubles, _Mapping]] = ...) -> None: ...
    class StaticEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    COVARIATES_FIELD_NUMBER: _ClassVar[int]
    FUTURE_COVARIATES_FIELD_NUMBER: _ClassVar[int]
    STATIC_FIELD_NUMBER: _ClassVar[int]
    id: str
    values: _containers.RepeatedScalarFieldContainer[float]
    timestamps: _containers.RepeatedScalarFieldContainer[str]
    start: str
    covariates: _containers.MessageMap[str, Doubles]
    future_covariates: _containers.MessageMap[str, Doubles]
    static: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[str] = ..., values: _Optional[_Iterable[float]] = ..., timestamps: _Optional[_Iterable[str]] = ..., start: _Optional[str] = ..., covariates: _Optional[_Mapping[str, Doubles]] = ..., future_covariates: _Optional[_Mapping[str, Doubles]] = ..., static: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ForecastPanelRequest(_message.Message):
    __slots__ = ("series", "frequency", "horizon", "model", "deployment", "calendar")
    SERIES_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_FIELD_NUMBER: _ClassVar[int]
    HORIZON_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    CALENDAR_FIELD_NUMBER: _ClassVar[int]
    series: _containers.RepeatedCompositeFieldContainer[SeriesInput]
    frequency: str
    horizon: int
    model: ModelChoice
    deployment: str
    calendar: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, series: _Optional[_Iterable[_Union[SeriesInput, _Mapping]]] = ..., frequency: _Optional[str] = ..., horizon: _Optional[int] = ..., model: _Optional[_Union[ModelChoice, str]] = ..., deployment: _Optional[str] = ..., calendar: _Optional[_Iterable[str]] = ...) -> None: ...

class SeriesForecast(_message.Message):
    __slots__ = ("id", "model", "degraded", "forecast", "input")
    ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    FORECAST_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    id: str
    model: ModelInfo
    degraded: bool
    forecast: _containers.RepeatedCompositeFieldContainer[ForecastPoint]
    input: InputReport
    def __init__(self, id: _Optional[str] = ..., model: _Optional[_Union[ModelInfo, _Mapping]] = ..., degraded: _Optional[bool] = ..., forecast: _Optional[_Iterable[_Union[ForecastPoint, _Mapping]]] = ..., input: _Optional[_Union[InputReport, _Mapping]] = ...) -> None: ...

class ForecastPanelResponse(_message.Message):
    __slots__ = ("request_id", "model", "deployment", "degraded", "degraded_reason", "timings", "runner_calls", "series")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASON_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    RUNNER_CALLS_FIELD_NUMBER: _ClassVar[int]
    SERIES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: ModelInfo
    deployment: str
    degraded: bool
    degraded_reason: str
    timings: Timings
    runner_calls: int
    series: _containers.RepeatedCompositeFieldContainer[SeriesForecast]
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[_Union[ModelInfo, _Mapping]] = ..., deployment: _Optional[str] = ..., degraded: _Optional[bool] = ..., degraded_reason: _Optional[str] = ..., timings: _Optional[_Union[Timings, _Mapping]] = ..., runner_calls: _Optional[int] = ..., series: _Optional[_Iterable[_Union[SeriesForecast, _Mapping]]] = ...) -> None: ...

class ForecastBacktestRequest(_message.Message):
    __slots__ = ("values", "timestamps", "start", "frequency", "horizon", "origins", "model", "deployment", "covariates", "calendar")
    class CovariatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Doubles
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Doubles, _Mapping]] = ...) -> None: ...
    VALUES_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_FIELD_NUMBER: _ClassVar[int]
    HORIZON_FIELD_NUMBER: _ClassVar[int]
    ORIGINS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    COVARIATES_FIELD_NUMBER: _ClassVar[int]
    CALENDAR_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    timestamps: _containers.RepeatedScalarFieldContainer[str]
    start: str
    frequency: str
    horizon: int
    origins: int
    model: ModelChoice
    deployment: str
    covariates: _containers.MessageMap[str, Doubles]
    calendar: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[float]] = ..., timestamps: _Optional[_Iterable[str]] = ..., start: _Optional[str] = ..., frequency: _Optional[str] = ..., horizon: _Optional[int] = ..., origins: _Optional[int] = ..., model: _Optional[_Union[ModelChoice, str]] = ..., deployment: _Optional[str] = ..., covariates: _Optional[_Mapping[str, Doubles]] = ..., calendar: _Optional[_Iterable[str]] = ...) -> None: ...

class BacktestOrigin(_message.Message):
    __slots__ = ("origin", "method", "mase", "rmsse", "actual", "forecast")
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    MASE_FIELD_NUMBER: _ClassVar[int]
    RMSSE_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_FIELD_NUMBER: _ClassVar[int]
    FORECAST_FIELD_NUMBER: _ClassVar[int]
    origin: str
    method: str
    mase: float
    rmsse: float
    actual: _containers.RepeatedScalarFieldContainer[float]
    forecast: _containers.RepeatedCompositeFieldContainer[ForecastPoint]
    def __init__(self, origin: _Optional[str] = ..., method: _Optional[str] = ..., mase: _Optional[float] = ..., rmsse: _Optional[float] = ..., actual: _Optional[_Iterable[float]] = ..., forecast: _Optional[_Iterable[_Union[ForecastPoint, _Mapping]]] = ...) -> None: ...

class ForecastBacktestResponse(_message.Message):
    __slots__ = ("request_id", "model", "deployment", "degraded", "degraded_reason", "timings", "frequency", "horizon", "runner_calls", "mase", "rmsse", "mase_by_step", "rmsse_by_step", "coverage_50", "coverage_90", "origins")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASON_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_FIELD_NUMBER: _ClassVar[int]
    HORIZON_FIELD_NUMBER: _ClassVar[int]
    RUNNER_CALLS_FIELD_NUMBER: _ClassVar[int]
    MASE_FIELD_NUMBER: _ClassVar[int]
    RMSSE_FIELD_NUMBER: _ClassVar[int]
    MASE_BY_STEP_FIELD_NUMBER: _ClassVar[int]
    RMSSE_BY_STEP_FIELD_NUMBER: _ClassVar[int]
    COVERAGE_50_FIELD_NUMBER: _ClassVar[int]
    COVERAGE_90_FIELD_NUMBER: _ClassVar[int]
    ORIGINS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: ModelInfo
    deployment: str
    degraded: bool
    degraded_reason: str
    timings: Timings
    frequency: str
    horizon: int
    runner_calls: int
    mase: float
    rmsse: float
    mase_by_step: _containers.RepeatedScalarFieldContainer[float]
    rmsse_by_step: _containers.RepeatedScalarFieldContainer[float]
    coverage_50: float
    coverage_90: float
    origins: _containers.RepeatedCompositeFieldContainer[BacktestOrigin]
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[_Union[ModelInfo, _Mapping]] = ..., deployment: _Optional[str] = ..., degraded: _Optional[bool] = ..., degraded_reason: _Optional[str] = ..., timings: _Optional[_Union[Timings, _Mapping]] = ..., frequency: _Optional[str] = ..., horizon: _Optional[int] = ..., runner_calls: _Optional[int] = ..., mase: _Optional[float] = ..., rmsse: _Optional[float] = ..., mase_by_step: _Optional[_Iterable[float]] = ..., rmsse_by_step: _Optional[_Iterable[float]] = ..., coverage_50: _Optional[float] = ..., coverage_90: _Optional[float] = ..., origins: _Optional[_Iterable[_Union[BacktestOrigin, _Mapping]]] = ...) -> None: ...

class PoseRequest(_message.Message):
    __slots__ = ("images", "conf_threshold", "iou_threshold", "max_detections", "model", "deployment")
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    CONF_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    IOU_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    MAX_DETECTIONS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    images: _containers.RepeatedScalarFieldContainer[bytes]
    conf_threshold: float
    iou_threshold: float
    max_detections: int
    model: ModelChoice
    deployment: str
    def __init__(self, images: _Optional[_Iterable[bytes]] = ..., conf_threshold: _Optional[float] = ..., iou_threshold: _Optional[float] = ..., max_detections: _Optional[int] = ..., model: _Optional[_Union[ModelChoice, str]] = ..., deployment: _Optional[str] = ...) -> None: ...

class PoseKeypoint(_message.Message):
    __slots__ = ("name", "x", "y", "confidence", "visible")
    NAME_FIELD_NUMBER: _ClassVar[int]
    X_FIELD_NUMBER: _ClassVar[int]
    Y_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    x: float
    y: float
    confidence: float
    visible: bool
    def __init__(self, name: _Optional[str] = ..., x: _Optional[float] = ..., y: _Optional[float] = ..., confidence: _Optional[float] = ..., visible: _Optional[bool] = ...) -> None: ...

class PosePerson(_message.Message):
    __slots__ = ("box", "score", "class_id", "label", "keypoints")
    BOX_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    CLASS_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    KEYPOINTS_FIELD_NUMBER: _ClassVar[int]
    box: _containers.RepeatedScalarFieldContainer[float]
    score: float
    class_id: int
    label: str
    keypoints: _containers.RepeatedCompositeFieldContainer[PoseKeypoint]
    def __init__(self, box: _Optional[_Iterable[float]] = ..., score: _Optional[float] = ..., class_id: _Optional[int] = ..., label: _Optional[str] = ..., keypoints: _Optional[_Iterable[_Union[PoseKeypoint, _Mapping]]] = ...) -> None: ...

class PoseImageResult(_message.Message):
    __slots__ = ("width", "height", "people", "candidates")
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    PEOPLE_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    width: int
    height: int
    people: _containers.RepeatedCompositeFieldContainer[PosePerson]
    candidates: int
    def __init__(self, width: _Optional[int] = ..., height: _Optional[int] = ..., people: _Optional[_Iterable[_Union[PosePerson, _Mapping]]] = ..., candidates: _Optional[int] = ...) -> None: ...

class PoseBone(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class PoseResponse(_message.Message):
    __slots__ = ("request_id", "model", "deployment", "degraded", "degraded_reason", "timings", "keypoint_names", "skeleton", "results")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASON_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    KEYPOINT_NAMES_FIELD_NUMBER: _ClassVar[int]
    SKELETON_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: ModelInfo
    deployment: str
    degraded: bool
    degraded_reason: str
    timings: Timings
    keypoint_names: _containers.RepeatedScalarFieldContainer[str]
    skeleton: _containers.RepeatedCompositeFieldContainer[PoseBone]
    results: _containers.RepeatedCompositeFieldContainer[PoseImageResult]
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[_Union[ModelInfo, _Mapping]] = ..., deployment: _Optional[str] = ..., degraded: _Optional[bool] = ..., degraded_reason: _Optional[str] = ..., timings: _Optional[_Union[Timings, _Mapping]] = ..., keypoint_names: _Optional[_Iterable[str]] = ..., skeleton: _Optional[_Iterable[_Union[PoseBone, _Mapping]]] = ..., results: _Optional[_Iterable[_Union[PoseImageResult, _Mapping]]] = ...) -> None: ...

class SegmentRequest(_message.Message):
    __slots__ = ("images", "conf_threshold", "iou_threshold", "max_detections", "class_aware", "model", "deployment", "mask_format")
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    CONF_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    IOU_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    MAX_DETECTIONS_FIELD_NUMBER: _ClassVar[int]
    CLASS_AWARE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    MASK_FORMAT_FIELD_NUMBER: _ClassVar[int]
    images: _containers.RepeatedScalarFieldContainer[bytes]
    conf_threshold: float
    iou_threshold: float
    max_detections: int
    class_aware: bool
    model: ModelChoice
    deployment: str
    mask_format: str
    def __init__(self, images: _Optional[_Iterable[bytes]] = ..., conf_threshold: _Optional[float] = ..., iou_threshold: _Optional[float] = ..., max_detections: _Optional[int] = ..., class_aware: _Optional[bool] = ..., model: _Optional[_Union[ModelChoice, str]] = ..., deployment: _Optional[str] = ..., mask_format: _Optional[str] = ...) -> None: ...

class RLE(_message.Message):
    __slots__ = ("size", "counts")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    size: _containers.RepeatedScalarFieldContainer[int]
    counts: str
    def __init__(self, size: _Optional[_Iterable[int]] = ..., counts: _Optional[str] = ...) -> None: ...

class Polygon(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, points: _Optional[_Iterable[float]] = ...) -> None: ...

class Instance(_message.Message):
    __slots__ = ("box", "score", "class_id", "label", "area", "rle", "polygons", "mask_skipped")
    BOX_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    CLASS_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    AREA_FIELD_NUMBER: _ClassVar[int]
    RLE_FIELD_NUMBER: _ClassVar[int]
    POLYGONS_FIELD_NUMBER: _ClassVar[int]
    MASK_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    box: _containers.RepeatedScalarFieldContainer[float]
    score: float
    class_id: int
    label: str
    area: int
    rle: RLE
    polygons: _containers.RepeatedCompositeFieldContainer[Polygon]
    mask_skipped: bool
    def __init__(self, box: _Optional[_Iterable[float]] = ..., score: _Optional[float] = ..., class_id: _Optional[int] = ..., label: _Optional[str] = ..., area: _Optional[int] = ..., rle: _Optional[_Union[RLE, _Mapping]] = ..., polygons: _Optional[_Iterable[_Union[Polygon, _Mapping]]] = ..., mask_skipped: _Optional[bool] = ...) -> None: ...

class SegmentImageResult(_message.Message):
    __slots__ = ("width", "height", "instances", "candidates", "masks_skipped")
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    MASKS_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    width: int
    height: int
    instances: _containers.RepeatedCompositeFieldContainer[Instance]
    candidates: int
    masks_skipped: int
    def __init__(self, width: _Optional[int] = ..., height: _Optional[int] = ..., instances: _Optional[_Iterable[_Union[Instance, _Mapping]]] = ..., candidates: _Optional[int] = ..., masks_skipped: _Optional[int] = ...) -> None: ...

class SegmentResponse(_message.Message):
    __slots__ = ("request_id", "model", "deployment", "degraded", "degraded_reason", "timings", "results")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASON_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: ModelInfo
    deployment: str
    degraded: bool
    degraded_reason: str
    timings: Timings
    results: _containers.RepeatedCompositeFieldContainer[SegmentImageResult]
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[_Union[ModelInfo, _Mapping]] = ..., deployment: _Optional[str] = ..., degraded: _Optional[bool] = ..., degraded_reason: _Optional[str] = ..., timings: _Optional[_Union[Timings, _Mapping]] = ..., results: _Optional[_Iterable[_Union[SegmentImageResult, _Mapping]]] = ...) -> None: ...

class ClassifyImageRequest(_message.Message):
    __slots__ = ("images", "top_k", "model", "deployment")
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    images: _containers.RepeatedScalarFieldContainer[bytes]
    top_k: int
    model: ModelChoice
    deployment: str
    def __init__(self, images: _Optional[_Iterable[bytes]] = ..., top_k: _Optional[int] = ..., model: _Optional[_Union[ModelChoice, str]] = ..., deployment: _Optional[str] = ...) -> None: ...

class ClassScore(_message.Message):
    __slots__ = ("class_id", "label", "score")
    CLASS_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    class_id: int
    label: str
    score: float
    def __init__(self, class_id: _Optional[int] = ..., label: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class ClassifiedImage(_message.Message):
    __slots__ = ("width", "height", "label", "score", "top_k")
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    width: int
    height: int
    label: str
    score: float
    top_k: _containers.RepeatedCompositeFieldContainer[ClassScore]
    def __init__(self, width: _Optional[int] = ..., height: _Optional[int] = ..., label: _Optional[str] = ..., score: _Optional[float] = ..., top_k: _Optional[_Iterable[_Union[ClassScore, _Mapping]]] = ...) -> None: ...

class ClassifyImageResponse(_message.Message):
    __slots__ = ("request_id", "model", "deployment", "degraded", "degraded_reason", "timings", "results")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASON_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: ModelInfo
    deployment: str
    degraded: bool
    degraded_reason: str
    timings: Timings
    results: _containers.RepeatedCompositeFieldContainer[ClassifiedImage]
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[_Union[ModelInfo, _Mapping]] = ..., deployment: _Optional[str] = ..., degraded: _Optional[bool] = ..., degraded_reason: _Optional[str] = ..., timings: _Optional[_Union[Timings, _Mapping]] = ..., results: _Optional[_Iterable[_Union[ClassifiedImage, _Mapping]]] = ...) -> None: ...
