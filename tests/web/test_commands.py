"""`attnlab serve`: registered in the CLI, loopback by default, one-line errors for bad runs."""

from __future__ import annotations

import pytest

from attnlab.cli import main, make_parser
from attnlab.web.registry import load_runs, parse_run_spec


def test_serve_is_registered_with_loopback_default():
    args = make_parser().parse_args(["serve", "runs/a"])
    assert args.host == "127.0.0.1" and args.port == 8000 and args.runs == ["runs/a"]


def test_serve_refuses_a_missing_run(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_run_names(tiny_runs, tmp_path):
    assert parse_run_spec("b=runs/x") == ("b", tmp_path.__class__("runs/x"))
    run = tiny_runs("bahdanau")
    runs = load_runs([run, run, f"mine={run}"])
    assert list(runs) == ["bahdanau", "bahdanau-2", "mine"]
    with pytest.raises(Exception, match="given twice"):
        load_runs([f"a={run}", f"a={run}"])
    with pytest.raises(Exception, match="run name"):
        load_runs([f"../x={run}"])


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_serve_refuses_an_invalid_port_before_loading_anything(tmp_path, capsys, port):
    """The run does not exist: the port is checked first, so its error is the one line printed."""
    assert main(["serve", str(tmp_path / "nope"), "--port", port]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --port {port} is not a TCP port") and err.count("\n") == 1, err


def test_serve_refuses_a_busy_port_before_loading_anything(tmp_path, capsys):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", str(tmp_path / "nope"), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot listen on 127.0.0.1:{port}: port {port} is in use"), err
    assert err.count("\n") == 1 and "attention explorer" not in err and "Traceback" not in err


def test_serve_holds_its_port_while_the_models_load(tiny_runs, monkeypatch, capsys):
    """The socket bound before loading is the one served on (`--port 0`: the port the system chose)."""
    import socket

    from attnlab.web import serving

    seen = {}

    def fake_serve(app, host, port, limits, log_level="info", sock=None):
        seen.update(port=port, bound=sock.getsockname()[1], runs=list(app.state.runs))
        with pytest.raises(OSError), socket.socket() as other:
            other.bind(("127.0.0.1", port))  # still ours
            other.listen()
        sock.close()

    monkeypatch.setattr(serving, "serve", fake_serve)
    assert main(["serve", str(tiny_runs("transformer")), "--port", "0"]) == 0
    assert seen["port"] == seen["bound"] > 0 and seen["runs"] == ["transformer"]
    assert f"http://127.0.0.1:{seen['port']}/" in capsys.readouterr().err


def test_serve_max_sentences_limits_a_list(tiny_runs, monkeypatch):
    """`--max-sentences N`: a list of N sentences is translated, one longer gets a 4xx whose one line names N."""
    from fastapi.testclient import TestClient

    from attnlab.web import serving

    seen = {}

    def fake_serve(app, host, port, limits, log_level="info", sock=None):
        seen.update(app=app, limits=limits)
        sock.close()

    monkeypatch.setattr(serving, "serve", fake_serve)
    assert main(["serve", str(tiny_runs("transformer")), "--port", "0", "--max-sentences", "3"]) == 0
    assert seen["limits"].max_sentences == 3
    with TestClient(seen["app"], base_url="http://127.0.0.1:8000") as c:
        assert c.post("/api/translate", json={"text": ["seven"] * 3}).status_code == 200
        r = c.post("/api/translate", json={"text": ["seven"] * 4})
        assert r.status_code in (413, 422), r.text
        msgs = [d["msg"] for d in r.json()["detail"]]
        assert len(msgs) == 1 and "\n" not in msgs[0] and "the limit is 3" in msgs[0], msgs
    assert make_parser().parse_args(["serve", "runs/a"]).max_sentences == 32


def test_serve_refuses_max_sentences_zero(capsys):
    with pytest.raises(SystemExit) as e:
        main(["serve", "runs/a", "--max-sentences", "0"])
    assert e.value.code == 2 and "--max-sentences" in capsys.readouterr().err
