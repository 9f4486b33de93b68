use super::Cli;
use super::print_json;
use crate::store::{self};
use serde_json::json;

pub(super) fn config(cli: &Cli, layers: &crate::defaults::Layers, json: bool) -> u8 {
    let (_, mut origins) = layers.merged();
    let store = store::default_dir(cli.store.as_deref());
    if !origins.iter().any(|o| o.key == "store") {
        let source = if std::env::var_os("KSEARCH_STORE").is_some() {
            "environment (KSEARCH_STORE)"
        } else {
            "built-in default"
        };
        origins.insert(
            0,
            crate::defaults::Origin {
                key: "store",
                value: json!(store),
                source: source.into(),
            },
        );
    }
    if json {
        print_json(
            &json!({"settings": origins, "files": layers.layers.iter().map(|(s, _)| s).collect::<Vec<_>>()}),
        );
    } else if origins.is_empty() {
        println!(
            "no config file found (ksearch.toml upward from here, or [defaults] in ~/.config/ksearch/config.toml)"
        );
    } else {
        for o in &origins {
            println!("{} = {}    # {}", o.key, o.value, o.source);
        }
    }
    0
}
