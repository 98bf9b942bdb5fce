//! (Being written.)

use super::spec::CommandSpec;

pub(super) const COMMANDS: &[CommandSpec] = &[];
