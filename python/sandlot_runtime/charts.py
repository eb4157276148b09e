"""Structured data beside a rich output's rendering: a matplotlib figure's chart and a pandas
DataFrame's columns, as JSON.

A figure still becomes its PNG; ``figure_chart`` adds what the picture shows as data: the
chart's type (line, scatter, bar, pie, box_and_whisker, a superchart of several axes, or
unknown), its title, axis labels and units, scales (linear, log, ..., datetime, categorical),
ticks and tick labels, and its elements (each line's or series' points, each bar's value, each
wedge's angle, each box's five numbers and outliers). It reads matplotlib's object model
(Figure -> Axes -> lines, collections, patches, containers) after the figure has been drawn for
its PNG; it never draws, and it never raises: whatever it does not understand is a chart of type
``unknown`` (title and labels, no elements), and whatever goes wrong, or grows past the bounds
below (points, elements, axes, time), leaves the chart out and the PNG alone.

``frame_data`` gives a DataFrame's columns as ``{column: [values]}`` (dates as ISO 8601 text,
missing values as null), for frames up to ``MAX_DATA_CELLS`` cells, ``MAX_DATA_COLUMNS``
columns and ``MAX_DATA_BYTES``.

Both return ``JSONData``: plain JSON (str keys, finite floats, clean strings) that the
protocol carries without converting it again. The MIME types they are published under are
sandlot's own; the E2B layer turns them into a result's ``chart`` and ``data`` fields.
"""

from __future__ import annotations

import math
import re
import sys
import time
import warnings

from .jsonsafe import JSONData, clean_str, jsonable

CHART_MIME = "application/vnd.sandlot.chart+json"
DATA_MIME = "application/vnd.sandlot.data+json"

# Bounds of one figure's chart: beyond any of them the figure is shown as its PNG alone.
MAX_POINTS = 25_000  # points of all lines and series together (about 1 MiB of JSON)
MAX_ELEMENTS = 2_000  # lines, series, bars, wedges or boxes, all axes together
MAX_AXES = 32
MAX_SECONDS = 0.25
MAX_TEXT = 1_000  # characters of a title, label or tick label
MAX_TICKS = 200  # per axis
# Bounds of one DataFrame's data.
MAX_DATA_CELLS = 50_000
MAX_DATA_COLUMNS = 1_000  # each column is a pandas call of its own
MAX_DATA_BYTES = 2 << 20

# "Time (s)" -> "s", "Distance [km]" -> "km": the unit a label ends with.
_UNIT = re.compile(r"(?:\(([^()]*)\)|\[([^\[\]]*)\])\s*$")
# "$\mathdefault{10^{3}}$" -> "10^{3}".
_MATHDEFAULT = re.compile(r"\$\\mathdefault\{(.*)\}\$")


class _GiveUp(Exception):
    """The chart would pass a bound: leave it out."""


class _Budget:
    def __init__(self) -> None:
        self.deadline = time.perf_counter() + MAX_SECONDS
        self.points = MAX_POINTS
        self.elements = MAX_ELEMENTS

    def spend(self, points: int = 0, elements: int = 0) -> None:
        self.points -= points
        self.elements -= elements
        if self.points < 0 or self.elements < 0 or time.perf_counter() > self.deadline:
            raise _GiveUp


def extras(obj: object, include=None, exclude=None) -> dict:
    """The structured data to add to ``obj``'s MIME bundle: ``{mime: JSONData}``, empty for
    anything but a matplotlib Figure or a pandas DataFrame (and when the caller's include or
    exclude leaves them out). Never raises (an interrupt still gets through)."""
    figure_module = sys.modules.get("matplotlib.figure")
    pandas = sys.modules.get("pandas")
    if figure_module is not None and isinstance(obj, figure_module.Figure):
        mime, make = CHART_MIME, figure_chart
    elif pandas is not None and isinstance(obj, pandas.DataFrame):
        mime, make = DATA_MIME, frame_data
    else:
        return {}
    if (include is not None and mime not in include) or (exclude is not None and mime in exclude):
        return {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a deprecation in matplotlib is not the cell's
            value = make(obj)
    except Exception:  # noqa: BLE001 - a chart it cannot read is shown as its PNG alone
        return {}
    return {} if value is None else {mime: value}


# -- figures ------------------------------------------------------------------------------------


def figure_chart(figure) -> JSONData | None:
    """The chart of a figure: its one axes' chart, or a superchart of its axes' charts; None
    for a figure without axes, or one past the bounds."""
    budget = _Budget()
    axes = [ax for ax in figure.get_axes()
            if ax.get_visible() and getattr(ax, "_colorbar", None) is None]
    if not axes or len(axes) > MAX_AXES:
        return None
    get_suptitle = getattr(figure, "get_suptitle", None)  # matplotlib 3.8+
    if callable(get_suptitle):
        suptitle = _text(get_suptitle())
    else:
        text = getattr(figure, "_suptitle", None)
        suptitle = _text(text.get_text()) if text is not None else None
    try:
        if len(axes) == 1:
            chart = _axes_chart(axes[0], budget)
            if chart["title"] is None:
                chart["title"] = suptitle
            return JSONData(chart)
        elements = [_axes_chart(ax, budget) for ax in axes]
    except _GiveUp:
        return None
    return JSONData({"type": "superchart", "title": suptitle, "elements": elements})


def _axes_chart(ax, budget: _Budget) -> dict:
    budget.spend()
    title = None
    for loc in ("center", "left", "right"):
        title = _text(ax.get_title(loc))
        if title is not None:
            break
    x_label, y_label = _text(ax.get_xlabel()), _text(ax.get_ylabel())
    labels = {"x_label": x_label, "y_label": y_label,
              "x_unit": _unit(x_label), "y_unit": _unit(y_label)}
    kind, elements = _classify(ax, budget) if ax.name == "rectilinear" else ("unknown", [])
    if kind == "pie":
        return {"type": "pie", "title": title, "elements": elements}
    chart = {"type": kind, "title": title, **labels}
    if kind in ("line", "scatter"):
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            scale = _scale(ax, axis, name)
            ticks, tick_labels = _ticks(axis, scale)
            chart[f"{name}_scale"] = scale
            chart[f"{name}_ticks"] = ticks
            chart[f"{name}_tick_labels"] = tick_labels
    chart["elements"] = elements
    return chart


def _classify(ax, budget: _Budget) -> tuple[str, list]:
    """The axes' chart type and elements: the one kind of data it holds, or unknown (nothing
    it knows, or several kinds at once, such as a line over a scatter)."""
    from matplotlib.collections import PathCollection
    from matplotlib.container import BarContainer, ErrorbarContainer
    from matplotlib.patches import Wedge

    lines = list(ax.lines)
    # Every line, patch and collection is looked at once before any is counted: a plot of
    # more than the elements a chart may hold gives up before that.
    if max(len(lines), len(ax.patches), len(ax.collections)) > MAX_ELEMENTS:
        raise _GiveUp
    # Lines that belong to error bars are decoration of the data they sit on.
    decoration = set()
    names = {}  # a line's legend label kept by its error bars' container
    for container in ax.containers:
        if isinstance(container, ErrorbarContainer):  # (data line, caps, bars)
            decoration.update(id(a) for a in _flatten(container[1:]) if a is not None)
            if container[0] is not None:
                names[id(container[0])] = _label(container)
    lines = [line for line in lines if id(line) not in decoration]
    kinds = {}
    boxes, lines = _boxes(ax, lines, budget)
    if boxes:
        kinds["box_and_whisker"] = boxes
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    if bars:
        kinds["bar"] = bars
    wedges = [p for p in ax.patches if isinstance(p, Wedge)]
    if wedges:
        kinds["pie"] = wedges
    if lines:
        kinds["line"] = lines
    series = [c for c in ax.collections
              if isinstance(c, PathCollection) and id(c) not in decoration]
    if series:
        kinds["scatter"] = series
    if len(kinds) != 1:
        return "unknown", []
    kind, found = next(iter(kinds.items()))
    if kind == "box_and_whisker":
        return kind, found
    if kind == "bar":
        return kind, _bar_elements(ax, found, budget)
    if kind == "pie":
        return kind, _pie_elements(found, budget)
    return kind, _point_elements(ax, kind, found, names, budget)


def _flatten(container):
    for item in container:
        if isinstance(item, (tuple, list)):
            yield from _flatten(item)
        else:
            yield item


def _point_elements(ax, kind: str, artists: list, names: dict, budget: _Budget) -> list:
    np = sys.modules["numpy"]
    x_conv = _converter(ax, ax.xaxis, "x")
    y_conv = _converter(ax, ax.yaxis, "y")
    elements = []
    for artist in artists:
        raw = artist.get_xydata() if kind == "line" else artist.get_offsets()
        budget.spend(points=len(raw), elements=1)  # before anything is copied
        if hasattr(raw, "filled"):  # masked points are not drawn: leave them out
            raw = raw[~np.ma.getmaskarray(raw).reshape(len(raw), -1).any(axis=1)].data
        xy = np.asarray(raw, dtype=float)
        xy = xy.reshape(-1, 2) if xy.size else np.empty((0, 2))
        xs, ys = x_conv(xy[:, 0]), y_conv(xy[:, 1])
        label = _label(artist) or names.get(id(artist))
        elements.append({"label": label, "points": [list(p) for p in zip(xs, ys)]})
    return elements


def _bar_elements(ax, containers: list, budget: _Budget) -> list:
    elements = []
    for container in containers:
        group = _label(container)
        horizontal = getattr(container, "orientation", None) == "horizontal"
        axis, name = (ax.yaxis, "y") if horizontal else (ax.xaxis, "x")
        at = _position_labeller(ax, axis, name)
        values = getattr(container, "datavalues", None)
        patches = list(container.patches)
        if values is None or len(values) != len(patches):
            values = None
        budget.spend(elements=len(patches))
        for i, bar in enumerate(patches):
            if horizontal:
                position = bar.get_y() + bar.get_height() / 2
                value = bar.get_width()
            else:
                position = bar.get_x() + bar.get_width() / 2
                value = bar.get_height()
            if values is not None:
                value = values[i]
            elements.append({"label": at(position), "group": group, "value": _number(value)})
    return elements


def _pie_elements(wedges: list, budget: _Budget) -> list:
    budget.spend(elements=len(wedges))
    # Rounded: pie() computes in float32, and a slice of 10% is 36 degrees, not 35.999996.
    return [{"label": _label(w), "angle": _number(round(w.theta2 - w.theta1, 4)),
             "radius": _number(w.r)} for w in wedges]


def _boxes(ax, lines: list, budget: _Budget) -> tuple[list, list]:
    """The boxes of a box plot (``boxplot``/``bxp``) on the axes, and the lines that are not part
    of one. A box is a rectangle (a PathPatch, or a closed five-point line) with a median line
    across it; its whiskers, caps and fliers are the lines around it."""
    from matplotlib.patches import PathPatch

    np = sys.modules["numpy"]
    rects = []  # (x0, x1, y0, y1, artist)
    for patch in ax.patches:
        if isinstance(patch, PathPatch):
            vertices = np.asarray(patch.get_path().vertices, dtype=float)
            if len(vertices) >= 4 and np.isfinite(vertices).all():
                x0, y0 = vertices.min(axis=0)
                x1, y1 = vertices.max(axis=0)
                rects.append((x0, x1, y0, y1, patch))
    for line in lines:
        xy = np.asarray(line.get_xydata(), dtype=float)
        if len(xy) == 5 and np.array_equal(xy[0], xy[4]) and np.isfinite(xy).all() \
                and len(set(xy[:, 0])) == 2 and len(set(xy[:, 1])) == 2:
            x0, y0 = xy.min(axis=0)
            x1, y1 = xy.max(axis=0)
            rects.append((x0, x1, y0, y1, line))
    if not rects:
        return [], lines
    segments = []  # the two-point lines, as (x0, y0, x1, y1, line)
    markers = []  # lines drawn as markers only (fliers, means)
    for line in lines:
        xy = np.asarray(line.get_xydata(), dtype=float)
        if len(xy) == 2 and np.isfinite(xy).all() and line.get_linestyle() not in ("None", ""):
            segments.append((*xy[0], *xy[1], line))
        elif line.get_linestyle() in ("None", "") and np.isfinite(xy).all():
            markers.append((xy, line))
    used: set[int] = set()
    boxes = []
    for x0, x1, y0, y1, box in rects:
        budget.spend(elements=1)
        found = _box(x0, x1, y0, y1, segments, markers, used, vertical=True) or \
            _box(y0, y1, x0, x1, [(b, a, d, c, l) for a, b, c, d, l in segments],
                 [(xy[:, ::-1], l) for xy, l in markers], used, vertical=False)
        if found is None:
            return [], lines  # a rectangle without a median: not a box plot
        position, vertical, numbers, parts = found
        used.add(id(box))
        used.update(parts)
        boxes.append((position, vertical, numbers))
    rest = [line for line in lines if id(line) not in used]
    # Marker lines with no points (the fliers of a box without outliers) belong to the plot.
    rest = [line for line in rest
            if not (line.get_linestyle() in ("None", "") and len(line.get_xydata()) == 0)]
    elements = []
    for position, vertical, numbers in sorted(boxes, key=lambda b: b[0]):
        at = _position_labeller(ax, ax.xaxis if vertical else ax.yaxis, "x" if vertical else "y")
        elements.append({"label": at(position), **numbers})
    return elements, rest


def _box(c0, c1, q1, q3, segments, markers, used, vertical: bool):
    """One box whose extent across is [c0, c1] and along [q1, q3], or None. Coordinates are
    (across, along): the caller swaps them for a horizontal box plot."""
    middle = (c0 + c1) / 2
    eps = 1e-9 * max(1.0, abs(c1 - c0), abs(q3 - q1))
    median = whisker_low = whisker_high = None
    parts = []
    for a0, b0, a1, b1, line in segments:
        if id(line) in used:
            continue
        # The median spans the box: of the lines across it, the widest (a cap at a quartile
        # is narrower; a whisker of length 0 has no width).
        if abs(b0 - b1) <= eps and q1 - eps <= b0 <= q3 + eps \
                and min(a0, a1) >= c0 - eps and max(a0, a1) <= c1 + eps \
                and min(a0, a1) < middle < max(a0, a1):
            width = abs(a1 - a0)
            if median is None or width > median[2] + eps:
                median = (b0, line, width)
        if abs(a0 - middle) <= eps and abs(a1 - middle) <= eps:
            ends = sorted((b0, b1))
            if abs(ends[1] - q1) <= eps and whisker_low is None:
                whisker_low = (ends[0], line)
            elif abs(ends[0] - q3) <= eps and whisker_high is None:
                whisker_high = (ends[1], line)
    if median is None:
        return None
    low = whisker_low[0] if whisker_low else q1
    high = whisker_high[0] if whisker_high else q3
    parts.append(id(median[1]))
    parts += [id(w[1]) for w in (whisker_low, whisker_high) if w]
    for a0, b0, a1, b1, line in segments:  # the caps: short lines across each whisker's end
        if id(line) not in used and id(line) not in parts and abs(b0 - b1) <= eps \
                and min(a0, a1) <= middle <= max(a0, a1) \
                and (abs(b0 - low) <= eps or abs(b0 - high) <= eps):
            parts.append(id(line))
    outliers = []
    for xy, line in markers:
        if id(line) in used or id(line) in parts or not len(xy):
            continue
        if all(abs(a - middle) <= eps for a in xy[:, 0]):
            parts.append(id(line))
            # Points beyond the whiskers are outliers; one inside them is the box's mean.
            outliers += [_number(b) for b in xy[:, 1] if b < low - eps or b > high + eps]
    numbers = {"min": _number(low), "first_quartile": _number(q1), "median": _number(median[0]),
               "third_quartile": _number(q3), "max": _number(high), "outliers": outliers}
    return middle, vertical, numbers, parts


# -- axes: scales, ticks, values --------------------------------------------------------------


def _converter_kind(axis) -> str | None:
    """"datetime" or "categorical" when the axis converts dates or strings, else None."""
    get = getattr(axis, "get_converter", None)
    converter = get() if callable(get) else getattr(axis, "converter", None)
    if converter is None:
        return None
    dates = sys.modules.get("matplotlib.dates")
    category = sys.modules.get("matplotlib.category")
    if dates is not None and isinstance(converter, tuple(
            c for c in (getattr(dates, "DateConverter", None),
                        getattr(dates, "_SwitchableDateConverter", None)) if c is not None)):
        return "datetime"
    if category is not None and isinstance(converter, category.StrCategoryConverter):
        return "categorical"
    return None


def _scale(ax, axis, name: str) -> str:
    kind = _converter_kind(axis)
    if kind is not None:
        return kind
    scale = ax.get_xscale() if name == "x" else ax.get_yscale()
    return clean_str(str(scale))


def _categories(axis) -> dict:
    """Position -> category name of a categorical axis."""
    mapping = getattr(getattr(axis, "units", None), "_mapping", None) or {}
    return {int(v): _text(str(k), empty=True) for k, v in mapping.items()}


def _converter(ax, axis, name: str):
    """A function from an array of the axis' float positions to JSON values: ISO 8601 text on
    a datetime axis, category names on a categorical one, floats (null if not finite)."""
    kind = _converter_kind(axis)
    if kind == "datetime":
        return _iso
    if kind == "categorical":
        names = _categories(axis)

        def categorical(values):
            out = []
            for v in values.tolist():
                if math.isfinite(v) and v == int(v) and int(v) in names:
                    out.append(names[int(v)])
                else:
                    out.append(_number(v))
            return out

        return categorical
    return _floats


def _position_labeller(ax, axis, name: str):
    """A function from a position on the axis to its label: the category, the tick label at
    that position, the date, or the number."""
    kind = _converter_kind(axis)
    names = _categories(axis) if kind == "categorical" else {}
    try:
        locs, labels = _tick_pairs(axis)
    except Exception:  # noqa: BLE001 - without tick labels a position is its number
        locs, labels = [], []

    def at(position: float) -> str:
        if kind == "categorical" and position == int(position) and int(position) in names:
            return names[int(position)]
        for loc, label in zip(locs, labels):
            if math.isclose(loc, position, rel_tol=1e-9, abs_tol=1e-12) and label:
                return label
        if kind == "datetime":
            return _iso([position])[0] or ""
        return format(position, "g") if math.isfinite(position) else ""

    return at


def _tick_pairs(axis) -> tuple[list, list]:
    """The major ticks inside the view and their labels, as the formatter writes them."""
    np = sys.modules["numpy"]
    locs = np.asarray(axis.get_majorticklocs(), dtype=float)
    if len(locs) > 10 * MAX_TICKS:
        raise _GiveUp
    labels = axis.major.formatter.format_ticks(locs)
    low, high = sorted(axis.get_view_interval())
    slack = (high - low) * 1e-9
    keep = [(float(loc), label) for loc, label in zip(locs.tolist(), labels)
            if math.isfinite(loc) and low - slack <= loc <= high + slack][:MAX_TICKS]
    return [k for k, _ in keep], [_tick_text(label) for _, label in keep]


def _ticks(axis, scale: str) -> tuple[list, list]:
    locs, labels = _tick_pairs(axis)
    return (_iso(locs) if scale == "datetime" else locs), labels


def _floats(values) -> list:
    np = sys.modules["numpy"]
    array = np.asarray(values, dtype=float)
    out = array.tolist()
    if not np.isfinite(array).all():
        out = [v if math.isfinite(v) else None for v in out]
    return out


def _iso(values) -> list:
    """Matplotlib date numbers (days since its epoch, UTC) as ISO 8601 text; null where a value
    is not a date."""
    np = sys.modules["numpy"]
    dates = sys.modules["matplotlib.dates"]
    days = np.asarray(values, dtype=float)
    # Within numpy's range of microseconds (about 290,000 years either side).
    ok = np.isfinite(days) & (np.abs(days) < 1e8)
    micros = np.round(np.where(ok, days, 0.0) * 86_400e6).astype("int64")
    epoch = np.datetime64(dates.get_epoch(), "us")
    stamps = epoch + micros.astype("timedelta64[us]")
    unit = "s" if not (micros % 1_000_000).any() else "us"
    text = np.datetime_as_string(stamps, unit=unit)
    return [f"{t}+00:00" if good else None for t, good in zip(text.tolist(), ok.tolist())]


# -- DataFrames -------------------------------------------------------------------------------


def frame_data(frame) -> JSONData | None:
    """``{column: [values]}`` of a DataFrame (its index left out), or None past the bounds."""
    rows, columns = frame.shape
    if rows * columns > MAX_DATA_CELLS or columns > MAX_DATA_COLUMNS:
        return None
    deadline = time.perf_counter() + MAX_SECONDS
    size = 0
    out: dict = {}
    for i in range(columns):
        name = frame.columns[i]
        key = _text(name if isinstance(name, str) else str(name), empty=True)
        if key in out:  # columns with the same name: the first keeps it, as in to_dict
            continue
        values, used = _column_values(frame.iloc[:, i])
        size += used + len(key)
        if size > MAX_DATA_BYTES or time.perf_counter() > deadline:
            return None
        out[key] = values
    return JSONData(out)


def _column_values(series) -> tuple[list, int]:
    """A column's values as JSON and about how many bytes they take."""
    np = sys.modules["numpy"]
    kind = series.dtype.kind
    if kind in "biuf" and not series.hasnans and type(series.dtype).__module__ == "numpy":
        array = series.to_numpy()
        values = array.tolist() if kind != "f" else _floats(array)
        return values, 12 * len(values)
    if kind == "M" and getattr(series.dtype, "tz", None) is None:
        array = series.to_numpy()
        missing = np.isnat(array)
        ints = array.astype("datetime64[ns]").astype("int64")
        unit = "s" if not (ints[~missing] % 1_000_000_000).any() else \
            "us" if not (ints[~missing] % 1_000).any() else "ns"
        text = np.datetime_as_string(array, unit=unit).tolist()
        values = [None if m else t for t, m in zip(text, missing.tolist())]
        return values, 24 * len(values)
    values = []
    used = 0
    for value in series.tolist():
        value = _cell(value)
        used += len(value) + 2 if isinstance(value, str) else 12
        if used > MAX_DATA_BYTES:
            return values, used
        values.append(value)
    return values, used


def _cell(value):
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return clean_str(value)
    if isinstance(value, int):  # past 64 bits, jsonable's text (serde_json would lose it)
        return value if value.bit_length() <= 63 else jsonable(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    isoformat = getattr(value, "isoformat", None)  # datetime, date, time, pandas Timestamp
    if callable(isoformat):
        try:
            return clean_str(isoformat())
        except Exception:  # noqa: BLE001 - NaT and other missing values
            return None
    pandas = sys.modules.get("pandas")
    if pandas is not None:
        try:
            if pandas.isna(value) is True:
                return None
        except Exception:  # noqa: BLE001 - isna of an array-like: not a missing value
            pass
    return jsonable(value)


# -- text ---------------------------------------------------------------------------------------


def _text(value, empty: bool = False):
    """A title or label as JSON text, cut to MAX_TEXT; None for an empty one (unless
    ``empty``)."""
    if value is None:
        return "" if empty else None
    text = clean_str(value if isinstance(value, str) else str(value))[:MAX_TEXT]
    return text if text or empty else None


def _tick_text(label) -> str:
    """A tick label as text: mathtext's wrapping (``$\\mathdefault{10^{3}}$``, how log axes
    label their ticks) taken off."""
    text = _text(str(label), empty=True)
    match = _MATHDEFAULT.fullmatch(text)
    return match.group(1) if match else text


def _unit(label: str | None) -> str | None:
    if not label:
        return None
    match = _UNIT.search(label)
    if match is None:
        return None
    unit = (match.group(1) if match.group(1) is not None else match.group(2)).strip()
    return unit or None


def _label(artist) -> str | None:
    """An artist's legend label; None for matplotlib's own names (``_child0``, ``_nolegend_``)."""
    label = artist.get_label()
    if not isinstance(label, str):
        label = str(label) if label is not None else ""
    return None if not label or label.startswith("_") else _text(label)


def _number(value):
    """A finite float, or None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
