//! [`ChatTemplate`]: one Jinja chat template, compiled once, rendered for
//! a list of messages in Hugging Face's environment.

use std::fmt;
use std::sync::Arc;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::Value;
use minijinja::{context, Environment, Error, ErrorKind};

use crate::ChatTemplateError;

/// The name the template has in its environment (and in its errors'
/// `(in chat_template:LINE)`).
const NAME: &str = "chat_template";

/// One message of a conversation: `{ role, content }` to the template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    /// `"system"`, `"user"` or `"assistant"` (what the template knows).
    pub role: &'a str,
    /// The text.
    pub content: &'a str,
}

impl<'a> Message<'a> {
    /// A message from the user.
    pub fn user(content: &'a str) -> Message<'a> {
        Message {
            role: "user",
            content,
        }
    }
}

/// A compiled chat template (cloning it shares the compiled form).
#[derive(Clone)]
pub struct ChatTemplate {
    env: Arc<Environment<'static>>,
    source: String,
}

impl fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// What `raise_exception` fails with, so a render error can tell the
/// template's own refusal from the engine's.
#[derive(Debug)]
struct Raised(String);

impl fmt::Display for Raised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

/// The template's `raise_exception(message)`: an error carrying `message`.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(Raised(message)))
}

impl ChatTemplate {
    /// Compile `source`; an invalid template is
    /// [`ChatTemplateError::Syntax`].
    pub fn new(source: &str) -> Result<ChatTemplate, ChatTemplateError> {
        let mut env = Environment::new();
        // Hugging Face compiles chat templates with both on (llama.cpp too).
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| ChatTemplateError::Syntax {
                detail: e.to_string(),
            })?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned(NAME, source.to_owned())
            .map_err(|e| ChatTemplateError::Syntax {
                detail: e.to_string(),
            })?;
        Ok(ChatTemplate {
            env: Arc::new(env),
            source: source.to_owned(),
        })
    }

    /// The template's text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The text of `messages`, followed by the opening of the assistant's
    /// turn if `add_generation_prompt`; `bos_token` and `eos_token` are
    /// the model's BOS and EOS token texts (`""` if it has none).
    pub fn render(
        &self,
        messages: &[Message<'_>],
        add_generation_prompt: bool,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<String, ChatTemplateError> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| context! { role => m.role, content => m.content })
            .collect();
        let ctx = context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => bos_token,
            eos_token => eos_token,
        };
        let template = self
            .env
            .get_template(NAME)
            .map_err(|e| ChatTemplateError::Render {
                detail: e.to_string(),
            })?;
        template.render(ctx).map_err(|e| match raised(&e) {
            Some(message) => ChatTemplateError::Raised { message },
            None => ChatTemplateError::Render {
                detail: e.to_string(),
            },
        })
    }
}

/// The message of the `raise_exception` call behind `e`, if it is one.
fn raised(e: &Error) -> Option<String> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(Raised(message)) = c.downcast_ref::<Raised>() {
            return Some(message.clone());
        }
        cause = c.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{ChatTemplate, Message};
    use crate::ChatTemplateError;

    /// `tokenizer.chat_template` of SmolLM2-135M-Instruct.Q4_1.gguf.
    const SMOLLM2: &str = include_str!("../tests/data/smollm2-135m-instruct.jinja");
    /// A template in Gemma 3's turn format, written for these tests.
    const GEMMA3: &str = include_str!("../tests/data/gemma-turns.jinja");

    fn render(source: &str, messages: &[Message<'_>], bos: &str) -> String {
        ChatTemplate::new(source)
            .expect("compiles")
            .render(messages, true, bos, "<eos>")
            .expect("renders")
    }

    #[test]
    fn smollm2s_template_gives_chatml_with_its_default_system_message() {
        assert_eq!(
            render(SMOLLM2, &[Message::user("Hello")], "<|im_start|>"),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by \
             Hugging Face<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn smollm2s_template_keeps_a_system_message_given_in_place_of_its_own() {
        let messages = [
            Message {
                role: "system",
                content: "Be brief.",
            },
            Message::user("Hello"),
        ];
        assert_eq!(
            render(SMOLLM2, &messages, ""),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n\
             <|im_start|>assistant\n"
        );
    }

    #[test]
    fn without_the_generation_prompt_the_assistants_turn_is_not_opened() {
        let t = ChatTemplate::new(SMOLLM2).expect("compiles");
        let text = t
            .render(&[Message::user("Hello")], false, "", "")
            .expect("renders");
        assert!(
            text.ends_with("<|im_start|>user\nHello<|im_end|>\n"),
            "{text:?}"
        );
    }

    #[test]
    fn a_gemma_turn_template_writes_bos_then_the_user_and_model_turns() {
        assert_eq!(
            render(GEMMA3, &[Message::user("Hello")], "<bos>"),
            "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n"
        );
    }

    /// Gemma 3 has no system role: its template puts a system message at
    /// the head of the first user turn, and trims every content.
    #[test]
    fn a_gemma_turn_template_folds_a_system_message_into_the_first_user_turn_and_trims() {
        let messages = [
            Message {
                role: "system",
                content: "Be brief.",
            },
            Message::user("  Hello\n"),
            Message {
                role: "assistant",
                content: "Hi.",
            },
            Message::user("Bye"),
        ];
        assert_eq!(
            render(GEMMA3, &messages, "<bos>"),
            "<bos><start_of_turn>user\nBe brief.\n\nHello<end_of_turn>\n\
             <start_of_turn>model\nHi.<end_of_turn>\n\
             <start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
        );
    }

    #[test]
    fn a_gemma_turn_template_raises_on_roles_out_of_order() {
        let messages = [Message::user("Hello"), Message::user("again")];
        let e = ChatTemplate::new(GEMMA3)
            .expect("compiles")
            .render(&messages, true, "<bos>", "<eos>")
            .expect_err("refused");
        match &e {
            ChatTemplateError::Raised { message } => {
                assert_eq!(message, "turns must alternate: user, assistant, user, ...")
            }
            other => panic!("not Raised: {other}"),
        }
        assert_eq!(e.name(), "chat-template-raised");
        assert!(
            e.to_string()
                .starts_with("chat-template-raised: turns must alternate"),
            "{e}"
        );
    }

    #[test]
    fn raise_exception_is_the_typed_error_with_the_templates_message() {
        let t = ChatTemplate::new("{{ raise_exception('no system role, ' ~ messages[0].role) }}")
            .expect("compiles");
        let e = t
            .render(&[Message::user("x")], true, "", "")
            .expect_err("raised");
        assert!(
            matches!(&e, ChatTemplateError::Raised { message } if message == "no system role, user"),
            "{e:?}"
        );
    }

    #[test]
    fn an_unclosed_tag_is_a_syntax_error_naming_the_line() {
        for source in [
            "{% for m in messages %}{{ m.content }}",
            "line one\n{% if add_generation_prompt %}x",
            "{{ messages[0].content ",
            "{% endif %}",
        ] {
            let e = ChatTemplate::new(source).expect_err(source);
            assert!(
                matches!(e, ChatTemplateError::Syntax { .. }),
                "{source:?}: {e}"
            );
            assert_eq!(e.name(), "chat-template-syntax");
            assert!(e.to_string().contains("(in chat_template:"), "{e}");
        }
    }

    #[test]
    fn an_unknown_function_is_a_render_error_not_a_panic() {
        let t = ChatTemplate::new("{{ no_such_function() }}").expect("compiles");
        let e = t
            .render(&[Message::user("x")], true, "", "")
            .expect_err("fails");
        assert!(matches!(e, ChatTemplateError::Render { .. }), "{e}");
        assert!(e.to_string().starts_with("chat-template-render: "), "{e}");
    }

    /// The engine's own limits turn a template that nests or recurses too
    /// deep into an error, not a stack overflow.
    #[test]
    fn deep_nesting_and_runaway_recursion_are_errors_not_crashes() {
        let deep = format!("{{{{ {}1{} }}}}", "(".repeat(10_000), ")".repeat(10_000));
        let e = ChatTemplate::new(&deep).expect_err("too deep");
        assert!(matches!(e, ChatTemplateError::Syntax { .. }), "{e}");
        let t = ChatTemplate::new("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")
            .expect("compiles");
        let e = t
            .render(&[Message::user("x")], true, "", "")
            .expect_err("too deep");
        assert!(matches!(e, ChatTemplateError::Render { .. }), "{e}");
    }

    /// Real templates (SmolLM3's, DeepSeek-R1-Distill-Llama's, Qwen 3's)
    /// call Python's str methods; Hugging Face and llama.cpp have them.
    #[test]
    fn python_string_methods_work_as_in_hugging_faces_jinja() {
        let source = "{% for m in messages %}{% if m.content.startswith('/') %}\
                      [{{ m.content.strip('/ ').upper() }}]{% else %}\
                      {{ m.content.split(' ') | join(',') }}{% endif %}{% endfor %}";
        let t = ChatTemplate::new(source).expect("compiles");
        let text = t
            .render(
                &[Message::user("/ help /"), Message::user("a b c")],
                false,
                "",
                "",
            )
            .expect("renders");
        assert_eq!(text, "[HELP]a,b,c");
    }

    /// Hugging Face compiles with `trim_blocks` and `lstrip_blocks`: a
    /// block tag on its own line leaves no blank line and no indent.
    #[test]
    fn block_tags_on_their_own_lines_leave_no_whitespace() {
        let source = "{% for m in messages %}\n    {% if m.role == 'user' %}\n\
                      U:{{ m.content }}\n    {% endif %}\n{% endfor %}\n";
        let t = ChatTemplate::new(source).expect("compiles");
        let text = t
            .render(&[Message::user("a"), Message::user("b")], false, "", "")
            .expect("renders");
        assert_eq!(text, "U:a\nU:b\n");
    }

    #[test]
    fn loop_controls_and_tojson_are_there() {
        let source = "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}\
                      {{ m.content | tojson }}{% endfor %}";
        let t = ChatTemplate::new(source).expect("compiles");
        let text = t
            .render(
                &[Message::user("say \"hi\""), Message::user("b")],
                false,
                "",
                "",
            )
            .expect("renders");
        assert_eq!(text, r#""say \"hi\"""#);
    }
}
