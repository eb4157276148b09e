"""Rich results as E2B's code interpreter returns them, through the unmodified
`e2b-code-interpreter` SDK against a real `sandlot serve`: a matplotlib figure's structured chart
(`Result.chart`, parsed into the SDK's chart classes) beside its PNG, a DataFrame's columns
(`Result.data`), and a PIL image saved to a file returned as a PNG. The same chart and data
reach sandlot's own SDK (`Result.chart`, `Result.data`)."""

from __future__ import annotations

import base64
import datetime
import json
import textwrap

import pytest

from ._e2b import e2b_env  # noqa: F401  (a fixture)

e2b_ci = pytest.importorskip("e2b_code_interpreter")
from e2b_code_interpreter import charts as e2b_charts  # noqa: E402

pytestmark = pytest.mark.live

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def code(text: str) -> str:
    return textwrap.dedent(text).strip() + "\n"


@pytest.fixture(scope="module")
def sbx(e2b_env):
    sb = e2b_ci.Sandbox.create(timeout=300)
    try:
        yield sb
    finally:
        sb.kill()


def figure(sbx, body: str):
    """Runs a plotting cell and returns its one result: the figure."""
    execution = sbx.run_code(code("import matplotlib.pyplot as plt\nimport numpy as np\n") + code(body))
    assert execution.error is None, execution.error
    (result,) = execution.results
    assert base64.b64decode(result.png).startswith(PNG_MAGIC)
    assert not result.extra  # the chart is a field of its own
    return result


def test_line_chart_with_dates_units_and_ticks(sbx):
    result = figure(sbx, """
        import datetime
        days = [datetime.datetime(2024, 5, 1) + datetime.timedelta(hours=h) for h in range(48)]
        plt.figure()
        plt.plot(days, np.arange(48) * 1.5, label="load")
        plt.plot(days, np.arange(48) * 0.5, label="idle")
        plt.title("Server")
        plt.xlabel("Time (UTC)")
        plt.ylabel("Requests [k/s]")
        plt.show()
    """)
    chart = result.chart
    assert isinstance(chart, e2b_charts.LineChart) and chart.type == e2b_charts.ChartType.LINE
    assert (chart.title, chart.x_label, chart.y_label) == ("Server", "Time (UTC)", "Requests [k/s]")
    assert (chart.x_unit, chart.y_unit) == ("UTC", "k/s")
    assert chart.x_scale == e2b_charts.ScaleType.DATETIME and chart.y_scale == e2b_charts.ScaleType.LINEAR
    assert all(isinstance(datetime.datetime.fromisoformat(t), datetime.datetime) for t in chart.x_ticks)
    assert all(isinstance(t, float) for t in chart.y_ticks)
    assert len(chart.y_tick_labels) == len(chart.y_ticks)
    load, idle = chart.elements
    assert (load.label, idle.label) == ("load", "idle")
    assert len(load.points) == 48
    assert load.points[2] == ("2024-05-01T02:00:00+00:00", 3.0)


def test_log_and_categorical_scales(sbx):
    chart = figure(sbx, """
        plt.figure()
        plt.plot([1, 10, 100], ["small", "medium", "large"])
        plt.xscale("log")
        plt.show()
    """).chart
    assert chart.x_scale == e2b_charts.ScaleType.LOG
    assert chart.y_scale == e2b_charts.ScaleType.CATEGORICAL
    assert [y for _, y in chart.elements[0].points] == ["small", "medium", "large"]


def test_scatter_bar_pie_and_box_charts(sbx):
    chart = figure(sbx, """
        plt.figure()
        plt.scatter([1, 2, 3], [3, 1, 2], label="a")
        plt.scatter([4, 5], [5, 4], label="b")
        plt.xlabel("x")
        plt.show()
    """).chart
    assert isinstance(chart, e2b_charts.ScatterChart) and chart.title is None
    assert [(e.label, len(e.points)) for e in chart.elements] == [("a", 3), ("b", 2)]

    chart = figure(sbx, """
        plt.figure()
        plt.bar(["cats", "dogs", "fish"], [5, 7, 2], label="pets")
        plt.title("Pets")
        plt.show()
    """).chart
    assert isinstance(chart, e2b_charts.BarChart) and chart.title == "Pets"
    assert [(b.label, b.value, b.group) for b in chart.elements] == \
        [("cats", 5, "pets"), ("dogs", 7, "pets"), ("fish", 2, "pets")]

    chart = figure(sbx, """
        fig, ax = plt.subplots()
        ax.pie([60, 30, 10], labels=["a", "b", "c"], startangle=90)
        plt.show()
    """).chart
    assert isinstance(chart, e2b_charts.PieChart)
    assert [(w.label, w.angle, w.radius) for w in chart.elements] == \
        [("a", 216, 1), ("b", 108, 1), ("c", 36, 1)]

    chart = figure(sbx, """
        fig, ax = plt.subplots()
        ax.boxplot([[1, 2, 3, 4, 5], [2, 3, 4, 5, 30]], tick_labels=["low", "high"])
        ax.set_ylabel("Score")
        plt.show()
    """).chart
    assert isinstance(chart, e2b_charts.BoxAndWhiskerChart) and chart.y_label == "Score"
    low, high = chart.elements
    assert (low.label, low.min, low.first_quartile, low.median, low.third_quartile, low.max) == \
        ("low", 1, 2, 3, 4, 5)
    assert (high.label, high.outliers, high.max) == ("high", [30], 5)


def test_superchart_and_unknown_chart(sbx):
    chart = figure(sbx, """
        fig, (a, b) = plt.subplots(1, 2)
        fig.suptitle("Two views")
        a.plot([1, 2, 3])
        a.set_title("trend")
        b.scatter([1, 2], [2, 1])
        b.set_title("points")
        plt.show()
    """).chart
    assert isinstance(chart, e2b_charts.SuperChart) and chart.title == "Two views"
    assert [(type(c), c.title) for c in chart.elements] == \
        [(e2b_charts.LineChart, "trend"), (e2b_charts.ScatterChart, "points")]

    chart = figure(sbx, """
        fig, ax = plt.subplots()
        ax.add_patch(plt.Rectangle((0, 0), 1, 1))
        ax.set_title("A square")
        plt.show()
    """).chart
    assert chart.type == e2b_charts.ChartType.UNKNOWN
    assert chart.title == "A square" and chart.elements == []


def test_chart_survives_the_sdks_json(sbx):
    execution = sbx.run_code(code("""
        import matplotlib.pyplot as plt
        plt.plot([1, 2], [2, float("nan")])
        plt.show()
    """))
    serialized = json.loads(execution.to_json())
    chart = serialized["results"][0]["chart"]
    assert chart["type"] == "line"
    assert chart["elements"][0]["points"] == [[1.0, 2.0], [2.0, None]]


def test_a_chart_the_extractor_cannot_read_is_the_png_alone(sbx):
    # A figure past the extractor's bounds (more points than a chart carries) is still shown.
    execution = sbx.run_code(code("""
        import matplotlib.pyplot as plt
        plt.plot(range(30_000))
        plt.show()
    """))
    assert execution.error is None and execution.logs.stderr == []
    (result,) = execution.results
    assert result.png and result.chart is None and not result.extra


def test_dataframe_result_has_its_data(sbx):
    execution = sbx.run_code(code("""
        import pandas as pd
        pd.DataFrame({"a": [1, 2, 3], "when": pd.to_datetime(["2024-01-01", "2024-01-02", None]),
                      "x": [0.5, float("nan"), 2.0]})
    """))
    (result,) = execution.results
    assert result.is_main_result and "<table" in result.html
    assert result.data == {"a": [1, 2, 3], "when": ["2024-01-01T00:00:00", "2024-01-02T00:00:00", None],
                           "x": [0.5, None, 2.0]}
    assert "data" in result.formats() and not result.extra


def test_saved_pil_image_is_returned_as_png(sbx):
    execution = sbx.run_code(code("""
        from PIL import Image
        Image.new("RGB", (12, 12), "blue").save("blue.png")
        print("saved")
    """))
    assert execution.logs.stdout == ["saved\n"]
    (result,) = execution.results
    assert base64.b64decode(result.png).startswith(PNG_MAGIC)
    assert sbx.files.read("/home/user/blue.png", format="bytes").startswith(PNG_MAGIC)


def test_image_show_is_returned_as_png(sbx):
    execution = sbx.run_code(code("""
        import numpy
        from PIL import Image
        Image.fromarray((numpy.random.rand(16, 16, 3) * 255).astype("uint8")).convert("RGBA").show()
        print("shown")
    """))
    assert execution.error is None, execution.error
    assert execution.logs.stdout == ["shown\n"]
    (result,) = execution.results
    assert base64.b64decode(result.png).startswith(PNG_MAGIC)


def test_sandlots_own_sdk_gets_the_same_chart_and_data(sandbox):
    execution = sandbox.run_code(code("""
        import matplotlib.pyplot as plt
        import pandas as pd
        plt.figure()
        plt.bar(["x", "y"], [1, 2])
        plt.title("Own SDK")
        plt.show()
        pd.DataFrame({"n": [1, 2]})
    """))
    figure_result, frame_result = execution.results
    assert figure_result.png and figure_result.chart["type"] == "bar"
    assert figure_result.chart["title"] == "Own SDK"
    assert [e["label"] for e in figure_result.chart["elements"]] == ["x", "y"]
    assert figure_result.formats() == ["text", "png", "chart"]
    assert frame_result.data == {"n": [1, 2]}
    assert frame_result.chart is None and figure_result.data is None
