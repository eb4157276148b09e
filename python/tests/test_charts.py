"""Structured data beside rich outputs (charts.py): a figure's chart, a DataFrame's columns, and
a PIL image saved to a file shown. The extractor is exercised in-process for each chart type;
the driver tests check what reaches the wire: the chart in the figure's own bundle, beside
its PNG, and the PNG alone whenever the chart cannot be made."""

from __future__ import annotations

import base64
import datetime
import json
import textwrap

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from sandlot_runtime import charts  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def chart_of(fig) -> dict:
    """The chart as the wire carries it (strict JSON: a NaN would fail here)."""
    fig.canvas.draw()
    try:
        chart = charts.figure_chart(fig)
    finally:
        plt.close(fig)
    assert chart is not None
    return json.loads(json.dumps(chart, allow_nan=False))


def code(text: str) -> str:
    return textwrap.dedent(text).strip() + "\n"


# -- chart types, in-process ----------------------------------------------------------------


def test_line_chart_with_labels_units_ticks_and_points():
    fig, ax = plt.subplots()
    x = np.linspace(0, 10, 50)
    ax.plot(x, np.sin(x), label="sine")
    ax.plot(x, np.cos(x), label="cosine")
    ax.set_title("Waves")
    ax.set_xlabel("Time (s)")
    ax.set_ylabel("Level [dB]")
    chart = chart_of(fig)
    assert chart["type"] == "line" and chart["title"] == "Waves"
    assert (chart["x_label"], chart["x_unit"]) == ("Time (s)", "s")
    assert (chart["y_label"], chart["y_unit"]) == ("Level [dB]", "dB")
    assert chart["x_scale"] == chart["y_scale"] == "linear"
    assert chart["x_ticks"] and all(isinstance(t, float) for t in chart["x_ticks"])
    assert len(chart["x_tick_labels"]) == len(chart["x_ticks"])
    assert all(isinstance(t, str) for t in chart["y_tick_labels"])
    assert [e["label"] for e in chart["elements"]] == ["sine", "cosine"]
    first = chart["elements"][0]["points"]
    assert len(first) == 50 and first[0] == [0.0, 0.0]
    assert first[-1] == [10.0, pytest.approx(np.sin(10.0))]


def test_unlabelled_line_has_no_label_and_nan_points_are_null():
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [1.0, float("nan"), 3.0])
    chart = chart_of(fig)
    assert chart["title"] is None and chart["x_label"] is None and chart["x_unit"] is None
    element = chart["elements"][0]
    assert element["label"] is None  # not matplotlib's "_child0"
    assert element["points"] == [[1.0, 1.0], [2.0, None], [3.0, 3.0]]


def test_datetime_scale_gives_iso_ticks_and_points():
    fig, ax = plt.subplots()
    start = datetime.datetime(2024, 3, 1)
    ax.plot([start + datetime.timedelta(hours=h) for h in range(24)], range(24))
    chart = chart_of(fig)
    assert chart["x_scale"] == "datetime" and chart["y_scale"] == "linear"
    for tick in chart["x_ticks"]:
        assert datetime.datetime.fromisoformat(tick).tzinfo == datetime.timezone.utc
    points = chart["elements"][0]["points"]
    assert points[0] == ["2024-03-01T00:00:00+00:00", 0.0]
    assert points[5][0] == "2024-03-01T05:00:00+00:00"


def test_categorical_and_log_scales():
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], ["low", "mid", "high"])
    chart = chart_of(fig)
    assert (chart["x_scale"], chart["y_scale"]) == ("linear", "categorical")
    assert chart["y_tick_labels"] == ["low", "mid", "high"]
    assert chart["elements"][0]["points"] == [[1.0, "low"], [2.0, "mid"], [3.0, "high"]]

    fig, ax = plt.subplots()
    ax.plot([1, 10, 100, 1000], [1, 2, 3, 4])
    ax.set_xscale("log")
    chart = chart_of(fig)
    assert chart["x_scale"] == "log"
    # Log axes write ticks as mathtext; the chart gives the text inside.
    assert "10^{2}" in chart["x_tick_labels"]


def test_scatter_chart_has_one_element_per_series():
    fig, ax = plt.subplots()
    ax.scatter([1, 2, 3], [4, 5, 6], label="first")
    ax.scatter([7, 8], [9, 10], label="second")
    chart = chart_of(fig)
    assert chart["type"] == "scatter"
    assert [e["label"] for e in chart["elements"]] == ["first", "second"]
    assert chart["elements"][1]["points"] == [[7.0, 9.0], [8.0, 10.0]]


def test_bar_charts_vertical_horizontal_and_grouped():
    fig, ax = plt.subplots()
    ax.bar(["north", "south"], [3, 5], label="2023")
    ax.set_ylabel("Sales (k$)")
    chart = chart_of(fig)
    assert chart["type"] == "bar" and chart["y_unit"] == "k$"
    assert chart["elements"] == [{"label": "north", "group": "2023", "value": 3.0},
                                 {"label": "south", "group": "2023", "value": 5.0}]

    fig, ax = plt.subplots()
    ax.barh(["a", "b"], [1.5, 2.5])
    chart = chart_of(fig)
    assert [(e["label"], e["value"], e["group"]) for e in chart["elements"]] == \
        [("a", 1.5, None), ("b", 2.5, None)]

    fig, ax = plt.subplots()
    ax.bar([0, 1], [1, 2], width=0.4, label="x")
    ax.bar([0.4, 1.4], [3, 4], width=0.4, label="y")
    chart = chart_of(fig)
    assert [e["group"] for e in chart["elements"]] == ["x", "x", "y", "y"]
    assert [e["value"] for e in chart["elements"]] == [1.0, 2.0, 3.0, 4.0]


def test_pie_chart_angles_are_whole_degrees():
    fig, ax = plt.subplots()
    ax.pie([75, 25], labels=["yes", "no"], startangle=90, autopct="%1.0f%%")
    ax.set_title("Votes")
    chart = chart_of(fig)
    assert chart["type"] == "pie" and chart["title"] == "Votes"
    assert chart["elements"] == [{"label": "yes", "angle": 270.0, "radius": 1.0},
                                 {"label": "no", "angle": 90.0, "radius": 1.0}]


@pytest.mark.parametrize("vertical", [True, False])
@pytest.mark.parametrize("patch_artist", [True, False])
def test_box_and_whisker_chart(vertical, patch_artist):
    fig, ax = plt.subplots()
    samples = {"first": [1, 2, 3, 4, 5], "second": [10, 11, 12, 13, 14, 40]}
    ax.boxplot(list(samples.values()), tick_labels=list(samples), patch_artist=patch_artist,
               orientation="vertical" if vertical else "horizontal")
    chart = chart_of(fig)
    assert chart["type"] == "box_and_whisker"
    first, second = chart["elements"]
    assert first == {"label": "first", "min": 1.0, "first_quartile": 2.0, "median": 3.0,
                     "third_quartile": 4.0, "max": 5.0, "outliers": []}
    assert second["label"] == "second" and second["outliers"] == [40.0]
    assert (second["min"], second["median"], second["max"]) == (10.0, 12.5, 14.0)


def test_a_box_whose_whisker_has_no_length_keeps_its_median():
    fig, ax = plt.subplots()
    ax.boxplot([[2, 3, 4, 5, 30]])  # the third quartile is the last point under the fence
    (box,) = chart_of(fig)["elements"]
    assert (box["first_quartile"], box["median"], box["third_quartile"]) == (3.0, 4.0, 5.0)
    assert (box["max"], box["outliers"]) == (5.0, [30.0])


def test_superchart_holds_each_axes_chart():
    fig, (left, right) = plt.subplots(1, 2)
    fig.suptitle("Both")
    left.plot([1, 2], [3, 4])
    left.set_title("Line")
    right.bar(["a"], [1])
    chart = chart_of(fig)
    assert chart["type"] == "superchart" and chart["title"] == "Both"
    assert [(c["type"], c["title"]) for c in chart["elements"]] == [("line", "Line"),
                                                                    ("bar", None)]


def test_a_colorbar_is_not_a_second_chart_and_suptitle_titles_a_single_axes():
    fig, ax = plt.subplots()
    image = ax.imshow([[1, 2], [3, 4]])
    fig.colorbar(image)
    fig.suptitle("Heat")
    chart = chart_of(fig)
    assert chart["type"] == "unknown" and chart["title"] == "Heat"


def test_unknown_charts_keep_title_and_labels_without_elements():
    fig, ax = plt.subplots()
    ax.add_artist(plt.Circle((0, 0), 1, fill=False))
    ax.set_title("Circle")
    ax.set_xlabel("x (m)")
    chart = chart_of(fig)
    assert chart == {"type": "unknown", "title": "Circle", "x_label": "x (m)", "y_label": None,
                     "x_unit": "m", "y_unit": None, "elements": []}
    fig, ax = plt.subplots()  # a line over a scatter: two kinds at once
    ax.plot([1, 2], [1, 2])
    ax.scatter([1, 2], [2, 1])
    assert chart_of(fig)["type"] == "unknown"
    fig = plt.figure()
    fig.add_subplot(projection="polar").plot([0, 1], [1, 2])
    assert chart_of(fig)["type"] == "unknown"


def test_error_bars_are_decoration_of_their_line():
    fig, ax = plt.subplots()
    ax.errorbar([1, 2, 3], [2, 4, 6], yerr=[0.1, 0.2, 0.3], label="measured")
    chart = chart_of(fig)
    assert chart["type"] == "line"
    assert [e["label"] for e in chart["elements"]] == ["measured"]


def test_a_figure_without_axes_or_past_the_bounds_has_no_chart():
    fig = plt.figure()
    assert charts.figure_chart(fig) is None
    plt.close(fig)
    fig, ax = plt.subplots()
    ax.plot(np.arange(charts.MAX_POINTS + 1))
    assert charts.figure_chart(fig) is None
    plt.close(fig)
    fig, ax = plt.subplots()
    ax.plot(np.arange(charts.MAX_POINTS))  # at the bound: still a chart
    assert charts.figure_chart(fig)["type"] == "line"
    plt.close(fig)
    fig, ax = plt.subplots()
    for i in range(charts.MAX_ELEMENTS + 1):  # more lines than a chart holds
        ax.plot([i, i + 1])
    assert charts.figure_chart(fig) is None
    plt.close(fig)


def test_masked_scatter_points_are_left_out():
    fig, ax = plt.subplots()
    ax.scatter(np.ma.masked_array([1, 2, 3], mask=[0, 1, 0]), [4, 5, 6])
    chart = chart_of(fig)
    assert chart["elements"][0]["points"] == [[1.0, 4.0], [3.0, 6.0]]


def test_extras_never_raise_and_honour_include_and_exclude(monkeypatch):
    fig, ax = plt.subplots()
    ax.plot([1, 2])
    assert charts.CHART_MIME in charts.extras(fig)
    assert charts.extras(fig, exclude={charts.CHART_MIME}) == {}
    assert charts.extras(fig, include={"image/png"}) == {}

    def boom(*_args):
        raise RuntimeError("the extractor broke")

    monkeypatch.setattr(charts, "_axes_chart", boom)
    assert charts.extras(fig) == {}
    assert charts.extras(object()) == {} and charts.extras(3) == {}
    plt.close(fig)


# -- DataFrames, in-process -----------------------------------------------------------------


def test_frame_data_is_columns_of_json_values():
    frame = pd.DataFrame({
        "n": [1, 2, 3],
        "x": [0.5, float("nan"), float("inf")],
        "s": ["a", None, "c"],
        "when": pd.to_datetime(["2024-01-02 00:00:00", None, "2024-01-03 04:05:06"]),
        "maybe": pd.array([1, None, 3], dtype="Int64"),
        7: [True, False, True],
    }, index=["r1", "r2", "r3"])
    data = charts.frame_data(frame)
    assert json.loads(json.dumps(data, allow_nan=False)) == {
        "n": [1, 2, 3],
        "x": [0.5, None, None],
        "s": ["a", None, "c"],
        "when": ["2024-01-02T00:00:00", None, "2024-01-03T04:05:06"],
        "maybe": [1, None, 3],
        "7": [True, False, True],
    }


def test_frame_data_of_objects_is_strict_json():
    frame = pd.DataFrame({"o": [2**70, {"k": float("nan")}, datetime.date(2024, 1, 2), b"\xff"]})
    data = json.loads(json.dumps(charts.frame_data(frame), allow_nan=False))
    assert data["o"][0] == "<int of 71 bits>"
    assert data["o"][1] == {"k": "nan"}
    assert data["o"][2] == "2024-01-02"


def test_frame_data_is_left_out_past_the_bounds():
    assert charts.frame_data(pd.DataFrame({"a": range(charts.MAX_DATA_CELLS + 1)})) is None
    long_text = "x" * (charts.MAX_DATA_BYTES // 4)
    assert charts.frame_data(pd.DataFrame({"t": [long_text] * 5})) is None
    assert charts.frame_data(pd.DataFrame({"a": range(charts.MAX_DATA_CELLS)})) is not None
    wide = pd.DataFrame([list(range(charts.MAX_DATA_COLUMNS + 1))])
    assert charts.frame_data(wide) is None


# -- through the driver -----------------------------------------------------------------------


def test_a_figure_bundle_carries_png_and_chart(shared):
    execution = shared.run(code("""
        import matplotlib.pyplot as plt
        plt.figure()
        plt.bar(["a", "b"], [1, 2], label="g")
        plt.title("Bars")
        plt.show()
    """))
    assert execution.status == "ok", execution.events
    (frame,) = execution.of_type("display_data")
    data = frame["data"]
    assert base64.b64decode(data["image/png"]).startswith(PNG_MAGIC)
    assert data[charts.CHART_MIME]["type"] == "bar"
    assert data[charts.CHART_MIME]["title"] == "Bars"
    assert execution.stderr == ""


def test_a_figure_as_the_last_value_has_its_chart(shared):
    execution = shared.run(code("""
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3])
        plt.close(fig)
        fig
    """))
    assert execution.result["data"][charts.CHART_MIME]["type"] == "line"


def test_a_broken_extractor_leaves_the_png_and_no_error(driver):
    execution = driver.run(code("""
        import sandlot_runtime.charts as charts
        def broken(*args):
            raise RuntimeError("extractor bug")
        charts._axes_chart = broken
        import matplotlib.pyplot as plt
        plt.plot([1, 2, 3])
        plt.show()
        print("after")
    """))
    assert execution.status == "ok", execution.events
    (frame,) = execution.of_type("display_data")
    assert base64.b64decode(frame["data"]["image/png"]).startswith(PNG_MAGIC)
    assert charts.CHART_MIME not in frame["data"]
    assert execution.stdout == "after\n" and execution.stderr == ""


def test_a_chart_the_extractor_does_not_understand_is_unknown_beside_its_png(shared):
    execution = shared.run(code("""
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots()
        ax.fill_between([0, 1, 2], [0, 1, 0])
        ax.set_title("Area")
        plt.show()
    """))
    (frame,) = execution.of_type("display_data")
    assert "image/png" in frame["data"]
    assert frame["data"][charts.CHART_MIME] == {
        "type": "unknown", "title": "Area", "x_label": None, "y_label": None, "x_unit": None,
        "y_unit": None, "elements": []}


def test_dataframe_result_carries_its_data(shared):
    execution = shared.run("import pandas as pd\npd.DataFrame({'a': [1, 2, 3], 'b': list('xyz')})")
    data = execution.result["data"]
    assert "<table" in data["text/html"]
    assert data[charts.DATA_MIME] == {"a": [1, 2, 3], "b": ["x", "y", "z"]}


def test_a_pil_image_saved_to_a_file_is_shown(shared):
    execution = shared.run(code("""
        import io
        from PIL import Image
        image = Image.new("RGB", (8, 8), "red")
        image.save("red.png")
        image.save(io.BytesIO(), format="PNG")  # into a buffer: not shown
        print("saved")
    """))
    assert execution.status == "ok", execution.events
    assert execution.timeline() == ["display_data", ("stdout", "saved\n"), "done"]
    (frame,) = execution.of_type("display_data")
    assert base64.b64decode(frame["data"]["image/png"]).startswith(PNG_MAGIC)


def test_image_show_displays_the_image_in_the_cell(shared):
    # E2B's code interpreter shows `Image.show()` as the cell's PNG; the sandbox has no
    # desktop viewer for PIL to start.
    execution = shared.run(code("""
        from PIL import Image
        Image.new("RGBA", (16, 16), "blue").show()
        print("shown")
    """))
    assert execution.status == "ok", execution.events
    assert execution.timeline() == ["display_data", ("stdout", "shown\n"), "done"]
    (frame,) = execution.of_type("display_data")
    assert base64.b64decode(frame["data"]["image/png"]).startswith(PNG_MAGIC)


def test_saved_images_shown_are_bounded_per_cell(shared):
    execution = shared.run(code("""
        from PIL import Image
        for i in range(20):
            Image.new("L", (4, 4)).save(f"img{i}.png")
    """))
    assert execution.status == "ok"
    assert len(execution.of_type("display_data")) == 8
    again = shared.run("Image.new('L', (4, 4)).save('one_more.png')")
    assert len(again.of_type("display_data")) == 1  # the bound is per cell


def test_savefig_through_pillow_shows_the_figure_once(shared):
    execution = shared.run(code("""
        import matplotlib.pyplot as plt
        plt.plot([1, 2])
        plt.savefig("figure.jpg")
        plt.show()
    """))
    assert execution.status == "ok", execution.events
    (frame,) = execution.of_type("display_data")
    assert frame["data"][charts.CHART_MIME]["type"] == "line"
