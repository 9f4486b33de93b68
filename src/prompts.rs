//! Prompt templates (`prompts/*.j2`, minijinja), embedded in the binary. Each prompt of the design has
//! one file; the code only supplies values.

use minijinja::Environment;
use serde::Serialize;
use std::sync::OnceLock;

const TEMPLATES: &[(&str, &str)] = &[
    ("_task.j2", include_str!("../prompts/_task.j2")),
    ("_format.j2", include_str!("../prompts/_format.j2")),
    ("wm_init.j2", include_str!("../prompts/wm_init.j2")),
    ("wm_edit.j2", include_str!("../prompts/wm_edit.j2")),
    ("action.j2", include_str!("../prompts/action.j2")),
    ("debug.j2", include_str!("../prompts/debug.j2")),
    ("improve.j2", include_str!("../prompts/improve.j2")),
    ("evolve.j2", include_str!("../prompts/evolve.j2")),
    ("once.j2", include_str!("../prompts/once.j2")),
    ("reply_error.j2", include_str!("../prompts/reply_error.j2")),
];

fn env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        for (name, src) in TEMPLATES {
            env.add_template(name, src).expect("prompt templates parse");
        }
        env
    })
}

/// Renders `prompts/<name>` with `ctx`. A missing value is an error, not an empty string.
pub fn render(name: &str, ctx: impl Serialize) -> Result<String, String> {
    let t = env()
        .get_template(name)
        .map_err(|e| format!("prompt {name}: {e}"))?;
    t.render(minijinja::value::Serde(&ctx))
        .map_err(|e| format!("prompt {name}: {e:#}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_template_parses() {
        for (name, _) in super::TEMPLATES {
            super::env().get_template(name).unwrap();
        }
    }

    #[test]
    fn missing_values_are_errors() {
        let err = super::render("reply_error.j2", serde_json::json!({})).unwrap_err();
        assert!(err.contains("reply_error.j2"), "{err}");
        let ok = super::render(
            "reply_error.j2",
            serde_json::json!({"error": "no code block"}),
        )
        .unwrap();
        assert!(ok.contains("no code block"));
    }
}
