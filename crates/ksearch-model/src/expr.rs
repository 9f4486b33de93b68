//! The small expression language shared by shapes, scalars, grids, constraints and roofline formulas
//! (`docs/formats.md` §4). Parsed once into an AST, evaluated against an environment of named numbers.
//!
//! `/` is true division and `//` floors, so `ceil(N / BN)` means what a kernel engineer expects.

use std::collections::BTreeMap;
use std::fmt;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ExprError {
    #[error("cannot parse `{src}`: {msg} at column {col}")]
    Parse {
        src: String,
        msg: String,
        col: usize,
    },
    #[error("`{0}` is not defined here")]
    Unknown(String),
    #[error("`{src}` = {value} is not an integer")]
    NotInteger { src: String, value: f64 },
    #[error("`{0}` divides by zero")]
    DivByZero(String),
    #[error("unknown function `{0}`; known: ceil floor min max sqrt log2 abs")]
    UnknownFunction(String),
    #[error("function `{name}` takes {expected} argument(s), got {got}")]
    Arity {
        name: String,
        expected: &'static str,
        got: usize,
    },
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Num(f64),
    Var(String),
    Neg(Box<Node>),
    Not(Box<Node>),
    Bin(Op, Box<Node>, Box<Node>),
    Call(String, Vec<Node>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Mod,
    Pow,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
}

/// A parsed expression; keeps its source text for messages.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    src: String,
    root: Node,
}

pub type Env = BTreeMap<String, f64>;

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.src)
    }
}

impl Expr {
    pub fn parse(src: &str) -> Result<Expr, ExprError> {
        let toks = lex(src)?;
        let mut p = Parser { src, toks, pos: 0 };
        let root = p.expr(0)?;
        if p.pos < p.toks.len() {
            return Err(p.err("unexpected token"));
        }
        Ok(Expr {
            src: src.to_string(),
            root,
        })
    }

    /// A literal integer as an expression (for TOML integers where a string is also allowed).
    pub fn int(v: i64) -> Expr {
        Expr {
            src: v.to_string(),
            root: Node::Num(v as f64),
        }
    }

    pub fn src(&self) -> &str {
        &self.src
    }

    /// Every identifier the expression reads (not function names).
    pub fn vars(&self) -> Vec<String> {
        fn walk(n: &Node, out: &mut Vec<String>) {
            match n {
                Node::Num(_) => {}
                Node::Var(v) => {
                    if !out.contains(v) {
                        out.push(v.clone())
                    }
                }
                Node::Neg(a) | Node::Not(a) => walk(a, out),
                Node::Bin(_, a, b) => {
                    walk(a, out);
                    walk(b, out)
                }
                Node::Call(_, args) => args.iter().for_each(|a| walk(a, out)),
            }
        }
        let mut out = Vec::new();
        walk(&self.root, &mut out);
        out
    }

    pub fn eval(&self, env: &Env) -> Result<f64, ExprError> {
        eval(&self.root, env, &self.src)
    }

    /// Evaluates and requires an integral result.
    pub fn eval_int(&self, env: &Env) -> Result<i64, ExprError> {
        let v = self.eval(env)?;
        if v.fract() != 0.0 || !v.is_finite() {
            return Err(ExprError::NotInteger {
                src: self.src.clone(),
                value: v,
            });
        }
        Ok(v as i64)
    }

    /// Evaluates a condition (non-zero is true).
    pub fn eval_bool(&self, env: &Env) -> Result<bool, ExprError> {
        Ok(self.eval(env)? != 0.0)
    }
}

fn truth(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

fn eval(n: &Node, env: &Env, src: &str) -> Result<f64, ExprError> {
    Ok(match n {
        Node::Num(v) => *v,
        Node::Var(name) => *env
            .get(name)
            .ok_or_else(|| ExprError::Unknown(name.clone()))?,
        Node::Neg(a) => -eval(a, env, src)?,
        Node::Not(a) => truth(eval(a, env, src)? == 0.0),
        Node::Bin(op, a, b) => {
            let x = eval(a, env, src)?;
            // Short-circuit so `B > 0 and N % B == 0` never divides by zero.
            match op {
                Op::And if x == 0.0 => return Ok(0.0),
                Op::Or if x != 0.0 => return Ok(1.0),
                _ => {}
            }
            let y = eval(b, env, src)?;
            match op {
                Op::Add => x + y,
                Op::Sub => x - y,
                Op::Mul => x * y,
                Op::Div | Op::FloorDiv | Op::Mod if y == 0.0 => {
                    return Err(ExprError::DivByZero(src.to_string()));
                }
                Op::Div => x / y,
                Op::FloorDiv => (x / y).floor(),
                Op::Mod => x - y * (x / y).floor(),
                Op::Pow => x.powf(y),
                Op::Lt => truth(x < y),
                Op::Le => truth(x <= y),
                Op::Gt => truth(x > y),
                Op::Ge => truth(x >= y),
                Op::Eq => truth(x == y),
                Op::Ne => truth(x != y),
                Op::And | Op::Or => truth(y != 0.0),
            }
        }
        Node::Call(name, args) => {
            let vals = args
                .iter()
                .map(|a| eval(a, env, src))
                .collect::<Result<Vec<_>, _>>()?;
            let one = |f: fn(f64) -> f64| -> Result<f64, ExprError> {
                match vals.as_slice() {
                    [v] => Ok(f(*v)),
                    _ => Err(ExprError::Arity {
                        name: name.clone(),
                        expected: "1",
                        got: vals.len(),
                    }),
                }
            };
            match name.as_str() {
                "ceil" => one(f64::ceil)?,
                "floor" => one(f64::floor)?,
                "sqrt" => one(f64::sqrt)?,
                "log2" => one(f64::log2)?,
                "abs" => one(f64::abs)?,
                "min" | "max" => {
                    if vals.is_empty() {
                        return Err(ExprError::Arity {
                            name: name.clone(),
                            expected: "1 or more",
                            got: 0,
                        });
                    }
                    let init = vals[0];
                    if name == "min" {
                        vals.iter().copied().fold(init, f64::min)
                    } else {
                        vals.iter().copied().fold(init, f64::max)
                    }
                }
                _ => return Err(ExprError::UnknownFunction(name.clone())),
            }
        }
    })
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Ident(String),
    Op(&'static str),
    LParen,
    RParen,
    Comma,
}

fn lex(src: &str) -> Result<Vec<(Tok, usize)>, ExprError> {
    let b = src.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    let err = |msg: &str, col: usize| ExprError::Parse {
        src: src.to_string(),
        msg: msg.to_string(),
        col: col + 1,
    };
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c.is_ascii_digit() || (c == b'.' && i + 1 < b.len() && b[i + 1].is_ascii_digit()) {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_') {
                // exponents such as 1e-3
                if (b[i] == b'e' || b[i] == b'E')
                    && i + 1 < b.len()
                    && (b[i + 1] == b'-' || b[i + 1] == b'+')
                {
                    i += 1;
                }
                i += 1;
            }
            let text: String = src[start..i].chars().filter(|c| *c != '_').collect();
            let v: f64 = text.parse().map_err(|_| err("bad number", start))?;
            out.push((Tok::Num(v), start));
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let word = &src[start..i];
            let tok = match word {
                "and" => Tok::Op("and"),
                "or" => Tok::Op("or"),
                "not" => Tok::Op("not"),
                _ => Tok::Ident(word.to_string()),
            };
            out.push((tok, start));
            continue;
        }
        // `get`, not slicing: the next character may be multi-byte (an LLM writing `≤`).
        let two = src.get(i..i + 2).unwrap_or("");
        let op2 = ["//", "**", "<=", ">=", "==", "!=", "&&", "||"]
            .into_iter()
            .find(|o| *o == two);
        if let Some(o) = op2 {
            let o = match o {
                "&&" => "and",
                "||" => "or",
                o => o,
            };
            out.push((Tok::Op(o), start));
            i += 2;
            continue;
        }
        let tok = match c {
            b'+' => Tok::Op("+"),
            b'-' => Tok::Op("-"),
            b'*' => Tok::Op("*"),
            b'/' => Tok::Op("/"),
            b'%' => Tok::Op("%"),
            b'<' => Tok::Op("<"),
            b'>' => Tok::Op(">"),
            b'!' => Tok::Op("not"),
            b'(' => Tok::LParen,
            b')' => Tok::RParen,
            b',' => Tok::Comma,
            _ => return Err(err(&format!("unexpected character `{}`", c as char), start)),
        };
        out.push((tok, start));
        i += 1;
    }
    Ok(out)
}

struct Parser<'a> {
    src: &'a str,
    toks: Vec<(Tok, usize)>,
    pos: usize,
}

fn binop(o: &str) -> Option<(Op, u8, bool)> {
    // (operator, precedence, right-associative)
    Some(match o {
        "or" => (Op::Or, 1, false),
        "and" => (Op::And, 2, false),
        "<" => (Op::Lt, 4, false),
        "<=" => (Op::Le, 4, false),
        ">" => (Op::Gt, 4, false),
        ">=" => (Op::Ge, 4, false),
        "==" => (Op::Eq, 4, false),
        "!=" => (Op::Ne, 4, false),
        "+" => (Op::Add, 5, false),
        "-" => (Op::Sub, 5, false),
        "*" => (Op::Mul, 6, false),
        "/" => (Op::Div, 6, false),
        "//" => (Op::FloorDiv, 6, false),
        "%" => (Op::Mod, 6, false),
        "**" => (Op::Pow, 8, true),
        _ => return None,
    })
}

impl Parser<'_> {
    fn err(&self, msg: &str) -> ExprError {
        let col = self
            .toks
            .get(self.pos)
            .map(|t| t.1)
            .unwrap_or(self.src.len());
        ExprError::Parse {
            src: self.src.to_string(),
            msg: msg.to_string(),
            col: col + 1,
        }
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.0)
    }

    fn expr(&mut self, min_prec: u8) -> Result<Node, ExprError> {
        let mut lhs = self.unary()?;
        while let Some(Tok::Op(o)) = self.peek() {
            let Some((op, prec, right)) = binop(o) else {
                break;
            };
            if prec < min_prec {
                break;
            }
            self.pos += 1;
            let rhs = self.expr(if right { prec } else { prec + 1 })?;
            lhs = Node::Bin(op, Box::new(lhs), Box::new(rhs));
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Node, ExprError> {
        match self.peek() {
            Some(Tok::Op("-")) => {
                self.pos += 1;
                // Unary minus binds looser than `**`, as in Python: -2**2 == -4.
                Ok(Node::Neg(Box::new(self.expr(7)?)))
            }
            Some(Tok::Op("+")) => {
                self.pos += 1;
                self.expr(7)
            }
            Some(Tok::Op("not")) => {
                self.pos += 1;
                Ok(Node::Not(Box::new(self.expr(3)?)))
            }
            _ => self.atom(),
        }
    }

    fn atom(&mut self) -> Result<Node, ExprError> {
        let Some(tok) = self.peek().cloned() else {
            return Err(self.err("expression ends too early"));
        };
        self.pos += 1;
        match tok {
            Tok::Num(v) => Ok(Node::Num(v)),
            Tok::Ident(name) => {
                if self.peek() == Some(&Tok::LParen) {
                    self.pos += 1;
                    let mut args = Vec::new();
                    if self.peek() != Some(&Tok::RParen) {
                        loop {
                            args.push(self.expr(0)?);
                            match self.peek() {
                                Some(Tok::Comma) => self.pos += 1,
                                Some(Tok::RParen) => break,
                                _ => return Err(self.err("expected `,` or `)`")),
                            }
                        }
                    }
                    self.pos += 1;
                    if !matches!(
                        name.as_str(),
                        "ceil" | "floor" | "min" | "max" | "sqrt" | "log2" | "abs"
                    ) {
                        return Err(ExprError::UnknownFunction(name));
                    }
                    Ok(Node::Call(name, args))
                } else {
                    Ok(Node::Var(name))
                }
            }
            Tok::LParen => {
                let e = self.expr(0)?;
                if self.peek() != Some(&Tok::RParen) {
                    return Err(self.err("expected `)`"));
                }
                self.pos += 1;
                Ok(e)
            }
            _ => {
                self.pos -= 1;
                Err(self.err("expected a number, a name or `(`"))
            }
        }
    }
}

/// TOML lets authors write `64` or `"ceil(N / 64)"`; both become an [`Expr`].
#[derive(Debug, Clone, PartialEq)]
pub struct ExprField(pub Expr);

impl<'de> serde::Deserialize<'de> for ExprField {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(v) => Ok(ExprField(Expr::int(v))),
            Raw::Str(s) => Expr::parse(&s)
                .map(ExprField)
                .map_err(serde::de::Error::custom),
        }
    }
}

impl serde::Serialize for ExprField {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.src())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(src: &str, env: &[(&str, f64)]) -> f64 {
        let env: Env = env.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        Expr::parse(src).unwrap().eval(&env).unwrap()
    }

    #[test]
    fn arithmetic_follows_python_rules() {
        assert_eq!(ev("1 + 2 * 3", &[]), 7.0);
        assert_eq!(ev("(1 + 2) * 3", &[]), 9.0);
        assert_eq!(ev("7 / 2", &[]), 3.5);
        assert_eq!(ev("7 // 2", &[]), 3.0);
        assert_eq!(ev("-7 // 2", &[]), -4.0);
        assert_eq!(ev("-7 % 3", &[]), 2.0);
        assert_eq!(ev("2 ** 3 ** 2", &[]), 512.0);
        assert_eq!(ev("-2 ** 2", &[]), -4.0);
        assert_eq!(ev("1e-3 * 1000", &[]), 1.0);
        assert_eq!(ev("1_000 + 1", &[]), 1001.0);
    }

    #[test]
    fn functions_and_names() {
        assert_eq!(ev("ceil(N / BN)", &[("N", 257.0), ("BN", 64.0)]), 5.0);
        assert_eq!(ev("max(1, min(N, 8), 3)", &[("N", 5.0)]), 5.0);
        assert_eq!(ev("log2(1024) + sqrt(16) + abs(-1)", &[]), 15.0);
        assert_eq!(ev("floor(2.7)", &[]), 2.0);
    }

    #[test]
    fn conditions_short_circuit() {
        assert_eq!(ev("B > 0 and N % B == 0", &[("B", 0.0), ("N", 3.0)]), 0.0);
        assert_eq!(ev("B == 0 or N % B == 0", &[("B", 0.0), ("N", 3.0)]), 1.0);
        assert_eq!(ev("not 0", &[]), 1.0);
        assert_eq!(
            ev("BM * BN <= 4096 && BM >= 8", &[("BM", 64.0), ("BN", 64.0)]),
            1.0
        );
    }

    #[test]
    fn errors_are_precise() {
        let e = Expr::parse("ceil(N / )").unwrap_err();
        assert!(matches!(e, ExprError::Parse { col: 10, .. }), "{e}");
        assert!(matches!(
            Expr::parse("cos(1)").unwrap_err(),
            ExprError::UnknownFunction(_)
        ));
        let e = Expr::parse("N / 2")
            .unwrap()
            .eval_int(&[("N".to_string(), 5.0)].into())
            .unwrap_err();
        assert!(matches!(e, ExprError::NotInteger { .. }));
        let e = Expr::parse("X + 1").unwrap().eval(&Env::new()).unwrap_err();
        assert_eq!(e, ExprError::Unknown("X".into()));
        assert!(matches!(
            Expr::parse("N // 0")
                .unwrap()
                .eval(&[("N".to_string(), 1.0)].into()),
            Err(ExprError::DivByZero(_))
        ));
        assert!(Expr::parse("1 2").is_err());
        assert!(Expr::parse("(1").is_err());
        assert!(Expr::parse("$").is_err());
        assert!(
            Expr::parse("BM ≤ 64").is_err(),
            "non-ASCII is an error, not a panic"
        );
    }

    #[test]
    fn vars_lists_identifiers_once() {
        let e = Expr::parse("ceil(M / BM) * BM + M").unwrap();
        assert_eq!(e.vars(), vec!["M".to_string(), "BM".to_string()]);
    }
}
