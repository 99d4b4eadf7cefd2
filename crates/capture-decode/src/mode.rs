//! `Mode`: which of the decoder's runs to make (one sequence, the bucket ladder over a
//! paged KV cache, or one sequence until its end token), run on a backend into its
//! report, as `capture decode` prints it, and its checks.

use capture_graphs::Result;

use crate::backend::DecodeBackend;
use crate::ladder::{LadderOptions, render_ladder, run_ladder};
use crate::report::render;
use crate::run::{Check, DecodeOptions, run};
use crate::until::{UntilOptions, render_until, run_until};

/// One decoder run, as `capture decode`'s options choose it.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    /// One sequence, eager against replayed (`capture decode`).
    Decode(DecodeOptions),
    /// A batch stepping over a paged KV cache, one graph per bucket
    /// (`--buckets`).
    Ladder(LadderOptions),
    /// One sequence until the device says stop (`--until-eos`, rule 30).
    Until(UntilOptions),
}

impl Mode {
    /// The option that chose the mode, as the command line spells it (empty for the
    /// plain run).
    pub fn option(&self) -> &'static str {
        match self {
            Mode::Decode(_) => "",
            Mode::Ladder(_) => " --buckets",
            Mode::Until(_) => " --until-eos",
        }
    }

    /// Runs the mode on `backend`: its report as text and its checks.
    ///
    /// # Errors
    ///
    /// What the runtime refused or the backend reported.
    pub fn run<B: DecodeBackend>(self, backend: B) -> Result<(String, Vec<Check>)> {
        Ok(match self {
            Mode::Decode(options) => {
                let report = run(backend, options)?;
                (render(&report), report.checks())
            }
            Mode::Ladder(options) => {
                let report = run_ladder(backend, options)?;
                (render_ladder(&report), report.checks())
            }
            Mode::Until(options) => {
                let report = run_until(backend, options)?;
                (render_until(&report), report.checks())
            }
        })
    }
}
