//! RLVE's environments (`pip install rlve-gym`, package `Gym`) as spade environments.
//!
//! This module and `rlve_adapter.py` are the one place RLVE's interface is adapted. An
//! environment `rlve:Name` is bundled from the installed package: `Gym`'s base modules, the
//! environment's directory and its parameter controller's directory, and the adapter class
//! (`NameEnv`) that plays it. `reset(seed, difficulty=0)` takes the difficulty as a reset field.
//!
//! Two things of the package are not run in the sandbox, both documented here:
//! - `Gym.environments` and `Gym.parameter_controllers` are bundled as empty packages: their
//!   `__init__.py` imports all 400 environments (some need networkx or sympy), to build the
//!   identifier tables that spade reads on the host instead;
//! - `torch` and `numpy`, which `Gym.environment` imports only to seed them, are stand-ins that
//!   fail with a message on any use. An environment that draws from numpy fails to reset.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Bundle, PackageError};

/// The environment variable naming the directory that holds `Gym/` (a site-packages
/// directory). Without it, spade asks `$SPADE_PYTHON` (default `python3`) where `Gym` is.
pub const RLVE_DIR_ENV: &str = "SPADE_RLVE_DIR";

const ADAPTER: &str = include_str!("rlve_adapter.py");

/// The stand-in for a module that `Gym.environment` imports but the sandbox does not have.
fn stand_in(module: &str) -> String {
    format!(
        "\"\"\"spade's stand-in for `{module}`, which the sandbox does not have. RLVE's \
         Gym.environment imports it to seed it; spade seeds `random`, the generator RLVE's \
         environments draw from.\"\"\"\n\n\n\
         def __getattr__(name):\n    \
         raise AttributeError(\n        \
         f\"{module}.{{name}}: {module} is not available in the spade sandbox \
         (only Python's standard library is)\"\n    )\n"
    )
}

/// The directory holding RLVE's `Gym` package: `$SPADE_RLVE_DIR`, or where Python finds it.
pub fn locate() -> Result<PathBuf, PackageError> {
    if let Some(dir) = std::env::var_os(RLVE_DIR_ENV) {
        let dir = PathBuf::from(dir);
        check_root(&dir, &format!("{RLVE_DIR_ENV}={}", dir.display()))?;
        return Ok(dir);
    }
    let python = std::env::var("SPADE_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = "import importlib.util, os\n\
                  s = importlib.util.find_spec('Gym')\n\
                  print(os.path.dirname(list(s.submodule_search_locations)[0]) if s and s.submodule_search_locations else '')";
    let not_found = |why: String| {
        PackageError::Rlve(format!(
            "RLVE's `Gym` package was not found ({why}): install it with `pip install rlve-gym` \
             into {python}'s environment, or set {RLVE_DIR_ENV} to the directory that holds Gym/"
        ))
    };
    let out = std::process::Command::new(&python)
        .args(["-c", script])
        .output()
        .map_err(|e| not_found(format!("cannot run {python}: {e}")))?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || dir.is_empty() {
        return Err(not_found(format!("{python} cannot import it")));
    }
    let dir = PathBuf::from(dir);
    check_root(&dir, &format!("{python} found it at {}", dir.display()))?;
    Ok(dir)
}

fn check_root(dir: &Path, how: &str) -> Result<(), PackageError> {
    if dir.join("Gym/environments/__init__.py").is_file() {
        Ok(())
    } else {
        Err(PackageError::Rlve(format!(
            "{how}, but {} holds no Gym/environments/__init__.py: it is not RLVE's Gym package",
            dir.display()
        )))
    }
}

/// One table of `Gym.environments` or `Gym.parameter_controllers`: identifier to (module
/// below the package, dotted, and class name), read from the package's `__init__.py`:
/// `from Gym.environments.countdown import CountdownEqual_Environment, ...` lines and the
/// entries `"CountdownEqual" : CountdownEqual_Environment,` (several may share a line).
fn read_table(
    gym: &Path,
    package: &str,
) -> Result<BTreeMap<String, (String, String)>, PackageError> {
    let path = gym.join(package).join("__init__.py");
    let text = std::fs::read_to_string(&path).map_err(|e| PackageError::io(&path, e))?;
    let prefix = format!("from Gym.{package}.");
    let mut module_of: BTreeMap<&str, &str> = BTreeMap::new();
    let mut table = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix(&prefix) {
            if let Some((module, classes)) = rest.split_once(" import ") {
                for class in classes.split(',') {
                    module_of.insert(class.trim(), module.trim());
                }
            }
            continue;
        }
        // `"Id" : Class,` entries: split on the quotes; odd pieces are identifiers, each
        // followed by `: Class,`.
        let pieces: Vec<&str> = line.split('"').collect();
        let mut k = 1;
        while k + 1 < pieces.len() {
            let (id, after) = (pieces[k], pieces[k + 1].trim());
            if let Some(class) = after.strip_prefix(':') {
                let class = class.trim().trim_end_matches(',').trim();
                table.insert(id.to_owned(), class.to_owned());
            }
            k += 2;
        }
    }
    let mut out = BTreeMap::new();
    for (id, class) in table {
        let Some(module) = module_of.get(class.as_str()) else {
            continue;
        };
        if super::is_identifier(&id)
            && super::is_identifier(&class)
            && module.split('.').all(super::is_identifier)
        {
            out.insert(id, (module.to_string(), class));
        }
    }
    if out.is_empty() {
        return Err(PackageError::Rlve(format!(
            "{} lists no environments in the form spade reads (`from Gym.{package}.<module> import <Class>` and `\"<Name>\" : <Class>,`)",
            path.display()
        )));
    }
    Ok(out)
}

/// The identifiers of every RLVE environment that has a parameter controller (the ones
/// `rlve:Name` can play), sorted.
pub fn names(root: &Path) -> Result<Vec<String>, PackageError> {
    let gym = root.join("Gym");
    let envs = read_table(&gym, "environments")?;
    let ctrls = read_table(&gym, "parameter_controllers")?;
    Ok(envs.into_keys().filter(|k| ctrls.contains_key(k)).collect())
}

/// The version of `rlve-gym` installed in `root`, from its `dist-info`, if it has one.
pub(crate) fn version(root: &Path) -> Option<String> {
    std::fs::read_dir(root).ok()?.flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        let rest = name.strip_prefix("rlve_gym-")?;
        Some(rest.strip_suffix(".dist-info")?.to_owned())
    })
}

/// Where `name`'s environment and controller are: (module below `Gym.environments`, class)
/// and (module below `Gym.parameter_controllers`, class), from the tables in `gym`.
pub(crate) type Located = ((String, String), (String, String));

/// Looks `name` up in the `Gym` package directory `gym`, with a message that lists similar
/// names when there is no such environment.
pub(crate) fn lookup(gym: &Path, name: &str) -> Result<Located, PackageError> {
    let envs = read_table(gym, "environments")?;
    let ctrls = read_table(gym, "parameter_controllers")?;
    let Some((env_module, env_class)) = envs.get(name) else {
        let lower = name.to_lowercase();
        let similar: Vec<&str> = envs
            .keys()
            .filter(|k| k.to_lowercase().contains(&lower) || lower.contains(&k.to_lowercase()))
            .map(String::as_str)
            .take(8)
            .collect();
        return Err(PackageError::Rlve(format!(
            "RLVE has no environment '{name}' (it has {} environments{})",
            envs.len(),
            if similar.is_empty() {
                String::new()
            } else {
                format!(", similar: {}", similar.join(", "))
            }
        )));
    };
    let Some((ctrl_module, ctrl_class)) = ctrls.get(name) else {
        return Err(PackageError::Rlve(format!(
            "RLVE's '{name}' has no parameter controller, so it has no difficulty levels to play"
        )));
    };
    Ok((
        (env_module.clone(), env_class.clone()),
        (ctrl_module.clone(), ctrl_class.clone()),
    ))
}

/// The source of `rlve:name`, bundled from the `Gym` package in `root`.
pub fn source(root: &Path, name: &str) -> Result<String, PackageError> {
    let gym = root.join("Gym");
    let ((env_module, env_class), (ctrl_module, ctrl_class)) = lookup(&gym, name)?;
    let (env_module, env_class, ctrl_module, ctrl_class) =
        (&env_module, &env_class, &ctrl_module, &ctrl_class);
    let mut bundle = Bundle::new();
    bundle.add_file(&gym.join("__init__.py"), "Gym", "Gym/__init__.py", true)?;
    for base in ["environment", "parameter_controller"] {
        bundle.add_file(
            &gym.join(format!("{base}.py")),
            &format!("Gym.{base}"),
            &format!("Gym/{base}.py"),
            false,
        )?;
    }
    for (package, module) in [
        ("environments", env_module),
        ("parameter_controllers", ctrl_module),
    ] {
        bundle.add_text(
            &format!("Gym.{package}"),
            &format!("Gym/{package}/"),
            true,
            String::new(),
        );
        // The module's top directory under the package, with everything in it.
        let top = module.split('.').next().unwrap_or(module);
        let dotted = format!("Gym.{package}.{top}");
        let filename = format!("Gym/{package}/{top}");
        bundle.add_tree(&gym.join(package).join(top), &dotted, &filename, 0)?;
    }
    for module in ["numpy", "torch"] {
        bundle.add_text(
            module,
            &format!("<spade stand-in for {module}>"),
            false,
            stand_in(module),
        );
    }
    bundle.check_size()?;
    let entry = ADAPTER
        .replace(
            "__SPADE_ENV_MODULE__",
            &format!("Gym.environments.{env_module}"),
        )
        .replace("__SPADE_ENV_CLASS__", env_class)
        .replace(
            "__SPADE_CTRL_MODULE__",
            &format!("Gym.parameter_controllers.{ctrl_module}"),
        )
        .replace("__SPADE_CTRL_CLASS__", ctrl_class)
        .replace("__SPADE_NAME__", name);
    let header = format!(
        "spade environment bundle: RLVE's {name} from rlve-gym {}\n(MIT, https://github.com/Zhiyuan-Zeng/RLVE), with spade's adapter",
        version(root).unwrap_or_else(|| "(version unknown)".into())
    );
    Ok(bundle.render(&header, &entry))
}
