//! `raylog completions <shell>` and `raylog man <dir>`: shell completions and man
//! pages generated from the clap definitions, so they never drift from `--help`.
//!
//! Both print or write only; packaging puts them in place (the Dockerfile does, and
//! the README's install section says where each shell looks).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::Cli;

#[derive(Args, Debug)]
#[command(
    about = "Print a shell completion script (bash, zsh, fish, elvish, powershell)",
    after_help = "Examples:\n  \
raylog completions bash > ~/.local/share/bash-completion/completions/raylog\n  \
raylog completions zsh > \"${fpath[1]}/_raylog\"\n  \
raylog completions fish > ~/.config/fish/completions/raylog.fish"
)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Args, Debug)]
#[command(
    about = "Write man pages: raylog.1 and one per command (raylog-parse.1, ...)",
    after_help = "Example:\n  \
raylog man /usr/local/share/man/man1 && man raylog-parse"
)]
pub struct ManArgs {
    /// Directory to write the pages into (created if missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// Runs `raylog completions`.
pub fn completions(a: CompletionsArgs) -> Result<u8> {
    let mut cmd = Cli::command();
    let mut out = io::stdout().lock();
    clap_complete::generate(a.shell, &mut cmd, "raylog", &mut out);
    // A closed pipe (`| head`) is not an error worth reporting.
    let _ = out.flush();
    Ok(0)
}

/// Runs `raylog man`.
pub fn man(a: ManArgs) -> Result<u8> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("{}: cannot create the directory", a.dir.display()))?;
    let written = write_pages(&Cli::command(), "raylog", &a.dir)?;
    eprintln!("raylog: wrote {written} man pages to {}", a.dir.display());
    Ok(0)
}

/// Writes `name.1` for `cmd` and a page for each subcommand, named the git way
/// (`raylog-parse.1`). Returns how many pages it wrote.
fn write_pages(cmd: &clap::Command, name: &str, dir: &Path) -> Result<usize> {
    let cmd = cmd.clone().name(name.to_string()).display_name(name.replace('-', " "));
    let path = dir.join(format!("{name}.1"));
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page).context("rendering a man page")?;
    std::fs::write(&path, page).with_context(|| format!("{}: cannot write", path.display()))?;
    let mut written = 1;
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        written += write_pages(sub, &format!("{name}-{}", sub.get_name()), dir)?;
    }
    Ok(written)
}
