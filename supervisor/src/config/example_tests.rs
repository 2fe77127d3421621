//! `examples/wfhost.toml` is the config's reference: every key of every
//! table is in it, on a line of its own with one line of meaning and its
//! default, and each default it states is the one the code applies. The
//! keys are read from the config structs themselves, so a key added to
//! them and not to the example fails here.

use std::path::Path;

use serde::de::{self, Deserialize, Visitor};

use super::containment::RawLimits;
use super::raw::{
    RawCommon, RawDeployment, RawFile, RawFleet, RawRecycle, RawRestart, RawStore, RawSupervisor,
};
use super::resolve::Lookup;
use super::*;

/// A deserializer that only records the field names a struct asks for.
struct Fields<'a>(&'a mut Vec<&'static str>);

impl<'de> de::Deserializer<'de> for Fields<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.extend_from_slice(fields);
        Err(de::Error::custom("fields recorded"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// The keys of config table `T`.
fn keys<'de, T: Deserialize<'de>>() -> Vec<&'static str> {
    let mut fields = Vec::new();
    let _ = T::deserialize(Fields(&mut fields));
    assert!(!fields.is_empty(), "no fields read");
    fields
}

fn example() -> (std::path::PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/wfhost.toml");
    let text = std::fs::read_to_string(&path).expect("examples/wfhost.toml");
    (path, text)
}

/// The example's line setting `key` in the table headed `table` (or in a
/// `[[deployment]]` when `table` is `deployment`), commented out or not.
fn line_of<'t>(text: &'t str, table: &str, key: &str) -> Option<&'t str> {
    let mut current = String::new();
    for line in text.lines() {
        let bare = line.trim_start_matches(['#', ' ']);
        if let Some(header) = bare
            .strip_prefix('[')
            .map(|h| h.trim_matches(['[', ']']).split(']').next().unwrap_or(""))
            // `# [fleet]`: a table left out of the example's running config.
            .filter(|_| line.starts_with('[') || line.starts_with("# ["))
        {
            current = header.trim().to_owned();
            continue;
        }
        if current == table && bare.split_once('=').is_some_and(|(k, _)| k.trim() == key) {
            return Some(line);
        }
    }
    None
}

/// The default a line states: the text after `(default: ` up to the `)`
/// closing it.
fn stated_default(line: &str) -> Option<&str> {
    let (_, rest) = line.split_once("(default: ")?;
    rest.strip_suffix(')')
}

#[test]
fn every_config_key_is_in_the_example_with_its_meaning_and_default() {
    let (_, text) = example();
    let tables = keys::<RawFile>();
    assert_eq!(
        tables,
        [
            "supervisor",
            "defaults",
            "store",
            "fleet",
            "console",
            "deployment"
        ]
    );
    let mut wanted: Vec<(&str, &str)> = Vec::new();
    wanted.extend(
        keys::<RawSupervisor>()
            .into_iter()
            .map(|k| ("supervisor", k)),
    );
    wanted.extend(keys::<RawStore>().into_iter().map(|k| ("store", k)));
    wanted.extend(keys::<RawFleet>().into_iter().map(|k| ("fleet", k)));
    wanted.extend(
        keys::<super::raw::RawConsole>()
            .into_iter()
            .map(|k| ("console", k)),
    );
    for key in keys::<RawCommon>() {
        match key {
            "recycle" => wanted.extend(
                keys::<RawRecycle>()
                    .into_iter()
                    .map(|k| ("defaults.recycle", k)),
            ),
            "restart" => wanted.extend(
                keys::<RawRestart>()
                    .into_iter()
                    .map(|k| ("defaults.restart", k)),
            ),
            "limits" => wanted.extend(
                keys::<RawLimits>()
                    .into_iter()
                    .map(|k| ("defaults.limits", k)),
            ),
            key => wanted.push(("defaults", key)),
        }
    }
    let common = keys::<RawCommon>();
    for key in keys::<RawDeployment>() {
        if !common.contains(&key) {
            wanted.push(("deployment", key));
        }
    }
    let mut missing = Vec::new();
    for (table, key) in wanted {
        match line_of(&text, table, key) {
            None => missing.push(format!("[{table}] {key}: not in the example")),
            Some(line) => {
                let comment = line
                    .trim_start_matches(['#', ' '])
                    .split_once(" # ")
                    .map(|(_, c)| c.trim());
                let meaning = comment.is_some_and(|c| c.len() > "(default: x)".len() + 10);
                let default = table == "deployment" || line.contains("(default: ");
                if !meaning || !default {
                    missing.push(format!(
                        "[{table}] {key}: wants `# <meaning> (default: <value>)`: {line}"
                    ));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "examples/wfhost.toml:\n{}",
        missing.join("\n")
    );
}

/// Parses `text` as a config at the example's path, programs found
/// anywhere.
fn parse_here(text: &str) -> Config {
    let (path, _) = example();
    let bin = tempfile::tempdir().expect("tempdir");
    let child = bin.path().join(super::resolve::CHILD_PROGRAM);
    std::fs::write(&child, "#!/bin/sh\n").expect("fake wfhost-child");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&child, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let lookup = Lookup {
        exe_dir: Some(bin.path().to_path_buf()),
        path_var: Some("/usr/bin:/bin".into()),
    };
    parse_with(text, &path, &lookup).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[test]
fn every_default_the_example_states_is_the_one_applied() {
    let (_, text) = example();
    let deployment = "[[deployment]]\nid = \"a\"\ncommand = [\"/bin/sh\"]\n";
    let bare = parse_here(deployment);
    let mut checked = 0;
    for (table, keys) in [
        ("supervisor", keys::<RawSupervisor>()),
        ("defaults", keys::<RawCommon>()),
        ("defaults.recycle", keys::<RawRecycle>()),
        ("defaults.restart", keys::<RawRestart>()),
        ("defaults.limits", keys::<RawLimits>()),
    ] {
        for key in keys {
            let Some(default) = line_of(&text, table, key).and_then(stated_default) else {
                continue;
            };
            // Only defaults written as TOML values can be set; the others
            // ("none", "the user's primary group") are words.
            let probe = format!("[{table}]\n{key} = {default}\n{deployment}");
            let Ok(parsed) = toml::from_str::<toml::Table>(&probe) else {
                continue;
            };
            drop(parsed);
            let set = parse_here(&probe);
            assert_eq!(
                (
                    &set.supervisor,
                    set.log_format,
                    set.allow_empty,
                    &set.deployments
                ),
                (
                    &bare.supervisor,
                    bare.log_format,
                    bare.allow_empty,
                    &bare.deployments
                ),
                "[{table}] {key}: the example says the default is {default}, the code differs"
            );
            checked += 1;
        }
    }
    assert!(checked >= 19, "only {checked} defaults could be checked");
}
