//! Ordinary notebook output must not trip any rule: images, digests, ids, arrays, frames,
//! tracebacks, installer logs. Each corpus mimics what Python actually prints.

use crate::common;

use base64::Engine as _;
use common::*;
use sandlot_guard::Scanner;

fn assert_clean(name: &str, text: &str) {
    let findings = Scanner::default().scan(text);
    let shown: Vec<String> = findings
        .iter()
        .map(|f| {
            let from = f.start.saturating_sub(40);
            let to = (f.end + 10).min(text.len());
            format!("{} at {}: {:?}", f.rule, f.start, text.get(from..to))
        })
        .collect();
    assert!(findings.is_empty(), "{name}: {shown:#?}");
}

/// A 1 MB PNG-like payload (signature + IHDR + random "compressed" data) in base64.
fn png_base64(rng: &mut Rng) -> String {
    let mut png =
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x04\x00\x00\x00\x03\x00\x08\x06\x00\x00\x00"
            .to_vec();
    png.extend(rng.bytes(1024 * 1024));
    base64::engine::general_purpose::STANDARD.encode(png)
}

#[test]
fn base64_png_one_line_wrapped_and_in_json() {
    let rng = &mut Rng::new(1);
    let b64 = png_base64(rng);
    assert!(b64.len() > 1_000_000);
    assert_clean("png one line", &b64);
    assert_clean(
        "png data uri",
        &format!("<img src=\"data:image/png;base64,{b64}\"/>"),
    );
    assert_clean(
        "png in display data",
        &format!(
            "{{\"image/png\": \"{b64}\", \"text/plain\": \"<Figure size 640x480 with 1 Axes>\"}}"
        ),
    );
    let wrapped: String = b64
        .as_bytes()
        .chunks(76)
        .map(|line| format!("{}\n", std::str::from_utf8(line).unwrap()))
        .collect();
    assert_clean("png wrapped at 76", &wrapped);
}

#[test]
fn hex_sha256_digests() {
    let rng = &mut Rng::new(2);
    let mut text = String::new();
    for i in 0..2000 {
        let digest = rng.token(HEX, 64);
        text.push_str(&match i % 6 {
            0 => format!("{digest}  data/part-{i:05}.parquet\n"),
            1 => format!("sha256:{digest}\n"),
            2 => format!("'{digest}'\n"),
            3 => format!("  Created wheel for pkg{i}: filename=pkg{i}-1.0-py3-none-any.whl size={i}0 sha256={digest}\n"),
            4 => format!("commit {}\nAuthor: A <a@b.c>\n", rng.token(HEX, 40)),
            _ => format!("hashlib.sha256(b'x').hexdigest() -> {digest}\n"),
        });
    }
    assert_clean("digests", &text);
}

#[test]
fn uuids() {
    let rng = &mut Rng::new(3);
    let mut text = String::new();
    for i in 0..2000 {
        let uuid = format!(
            "{}-{}-4{}-a{}-{}",
            rng.token(HEX, 8),
            rng.token(HEX, 4),
            rng.token(HEX, 3),
            rng.token(HEX, 3),
            rng.token(HEX, 12)
        );
        text.push_str(&match i % 5 {
            0 => format!("{uuid}\n"),
            1 => format!("UUID('{uuid}')\n"),
            2 => format!("request_id={uuid} status=200\n"),
            3 => format!("{{\"id\": \"{uuid}\", \"token_id\": \"{uuid}\"}}\n"),
            _ => format!("session key: {uuid}\n"),
        });
    }
    assert_clean("uuids", &text);
}

#[test]
fn numpy_array_print() {
    let rng = &mut Rng::new(4);
    let mut text = String::from("array([");
    for row in 0..2000 {
        text.push_str(if row == 0 { "[" } else { "       [" });
        let cells: Vec<String> = (0..8)
            .map(|_| {
                let v = (rng.next() % 2_000_000) as f64 / 1_000_000.0 - 1.0;
                format!("{v:11.8}")
            })
            .collect();
        text.push_str(&cells.join(", "));
        text.push_str("],\n");
    }
    text.push_str("       dtype=float32)\n");
    text.push_str("[[1.00000000e+00 2.71828183e+00 7.38905610e+00]\n [2.00855369e+01 5.45981500e+01 1.48413159e+02]]\n");
    assert_clean("numpy", &text);
}

#[test]
fn pandas_dataframe_print() {
    let rng = &mut Rng::new(5);
    let mut text = String::from(
        "          user_id            name  age     score  token_count   api_key_set\n",
    );
    for i in 0..3000 {
        text.push_str(&format!(
            "{i:<5} {:>12} {:>15} {:>4} {:>9.4} {:>12} {:>13}\n",
            rng.token("0123456789", 10),
            rng.token(LETTERS, 8),
            18 + rng.below(60),
            rng.below(10_000) as f64 / 97.0,
            rng.below(100_000),
            if i % 2 == 0 { "True" } else { "False" }
        ));
    }
    text.push_str("\n[3000 rows x 6 columns]\n");
    text.push_str("<class 'pandas.core.frame.DataFrame'>\nRangeIndex: 3000 entries, 0 to 2999\nData columns (total 6 columns):\n #   Column       Non-Null Count  Dtype  \n---  ------       --------------  -----  \n 0   user_id      3000 non-null   int64  \n 5   api_key_set  3000 non-null   bool   \ndtypes: bool(1), float64(1), int64(3), object(1)\nmemory usage: 120.4+ KB\n");
    assert_clean("pandas", &text);
}

#[test]
fn python_traceback() {
    let text = r#"Traceback (most recent call last):
  File "/home/user/.venv/lib/python3.12/site-packages/requests/auth.py", line 96, in __call__
    r.headers["Authorization"] = _basic_auth_str(self.username, self.password)
  File "/tmp/ipykernel_1234/3296138121.py", line 7, in <module>
    token = get_token(api_key=config["api_key"], secret=secret_name)
  File "/home/user/.venv/lib/python3.12/site-packages/botocore/credentials.py", line 2124, in load_credentials
    raise NoCredentialsError()
  File "<frozen importlib._bootstrap>", line 1387, in _gcd_import
KeyError: 'api_key'
botocore.exceptions.NoCredentialsError: Unable to locate credentials
ValueError: invalid literal for int() with base 10: 'password'
jwt.exceptions.InvalidTokenError: Signature verification failed
During handling of the above exception, another exception occurred:
AttributeError: 'NoneType' object has no attribute 'access_key'
"#;
    assert_clean("traceback", text);
}

#[test]
fn pip_install_output() {
    let rng = &mut Rng::new(6);
    let mut text = String::from("Looking in indexes: https://pypi.internal/simple\n");
    for pkg in [
        "tokenizers",
        "transformers",
        "cryptography",
        "keyring",
        "secretstorage",
        "pyjwt",
        "passlib",
    ] {
        text.push_str(&format!(
            "Collecting {pkg}>=0.19 (from -r requirements.txt (line 3))\n  Downloading https://files.pkgs.internal/packages/{}/{}/{}/{pkg}-0.19.1-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl (3.6 MB)\n     ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 3.6/3.6 MB 41.2 MB/s eta 0:00:00\n  Using cached {pkg}-0.19.1-py3-none-any.whl.metadata (6.7 kB)\nRequirement already satisfied: {pkg} in ./.venv/lib/python3.12/site-packages (0.19.1)\n",
            rng.token(HEX, 2),
            rng.token(HEX, 2),
            rng.token(HEX, 60),
        ));
    }
    text.push_str(&format!(
        "Building wheels for collected packages: passlib\n  Building wheel for passlib (pyproject.toml) ... done\n  Created wheel for passlib: filename=passlib-1.7.4-py3-none-any.whl size=525554 sha256={}\n  Stored in directory: /root/.cache/pip/wheels/{}/{}/{}\nSuccessfully built passlib\nInstalling collected packages: tokenizers, keyring, pyjwt, passlib\nSuccessfully installed keyring-25.5.0 passlib-1.7.4 pyjwt-2.10.1 tokenizers-0.19.1\n",
        rng.token(HEX, 64),
        rng.token(HEX, 2),
        rng.token(HEX, 2),
        rng.token(HEX, 60),
    ));
    text.push_str("WARNING: Running pip as the 'root' user can result in broken permissions.\n[notice] A new release of pip is available: 24.0 -> 24.3.1\n");
    assert_clean("pip", &text);
}
