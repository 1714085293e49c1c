//! `capture install|uninstall|status`: the change-capture triggers of the config's `[[capture]]`
//! tables.

use anyhow::Context as _;
use hare_outbox::backend::CaptureBackend;
use hare_outbox::capture::CaptureStatus;
use hare_outbox::{ChangeCapture, Outbox};

use crate::args::{InstallArgs, UninstallArgs};
use crate::config::Settings;
use crate::db::Db;
use crate::error::{DriftFound, usage};

/// `sales_orders` or `erp.sales_orders`.
fn name_of(capture: &ChangeCapture) -> String {
    match &capture.schema {
        Some(schema) => format!("{schema}.{}", capture.table),
        None => capture.table.clone(),
    }
}

fn status_name(status: &CaptureStatus) -> String {
    match &status.schema {
        Some(schema) => format!("{schema}.{}", status.table),
        None => status.table.clone(),
    }
}

/// Whether the installed `status` is the capture `configured` declares (same table; same schema
/// when the declaration names one).
fn same_table(configured: &ChangeCapture, status: &CaptureStatus) -> bool {
    configured.table == status.table
        && (configured.schema.is_none() || configured.schema == status.schema)
}

/// The configured captures, or a usage error saying where to declare them.
fn configured(settings: &Settings) -> anyhow::Result<&[ChangeCapture]> {
    if settings.captures.is_empty() {
        let file = settings.config_file.as_deref().map_or_else(
            || "no config file was read".to_owned(),
            |p| format!("none in {}", p.display()),
        );
        return Err(usage(format!(
            "no [[capture]] entries ({file}); declare one per captured table, e.g. [[capture]] table = \"sales_orders\""
        )));
    }
    Ok(&settings.captures)
}

/// `hare-outbox capture install`.
///
/// # Errors
/// A usage error (exit 2) when an entry is refused — by its own validation or against the
/// catalog — and then nothing is installed; a run-time error when the database fails.
pub async fn install(settings: &Settings, args: &InstallArgs) -> anyhow::Result<()> {
    let captures = configured(settings)?;
    let mut topics = Vec::with_capacity(captures.len());
    for capture in captures {
        let plan = capture
            .validate()
            .with_context(|| format!("[[capture]] table {:?}", name_of(capture)))?;
        topics.push(
            plan.topics
                .iter()
                .map(|(_, topic)| topic.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    let db = Db::connect(settings.database()?).await?;
    let installed = with_backend!(db, backend => {
        let outbox = Outbox::new(backend, settings.table.clone());
        if args.migrate {
            outbox
                .migrate()
                .await
                .with_context(|| format!("creating the outbox table {} failed", settings.table))?;
        }
        install_on(&outbox, captures).await
    })?;
    for ((capture, replaced), topics) in captures.iter().zip(installed).zip(topics) {
        let verb = if replaced { "reinstalled" } else { "installed" };
        println!(
            "capture {}: {verb} into {} (topics {topics})",
            name_of(capture),
            settings.table
        );
    }
    Ok(())
}

/// Installs every capture; on a refusal puts back what was there before (the previous
/// declaration, or no capture) and returns the error. Returns per capture whether it replaced an
/// installed one.
async fn install_on<B: CaptureBackend>(
    outbox: &Outbox<B>,
    captures: &[ChangeCapture],
) -> anyhow::Result<Vec<bool>> {
    let before = outbox
        .capture_status()
        .await
        .context("reading the installed captures")?;
    let previous = |capture: &ChangeCapture| before.iter().find(|s| same_table(capture, s));
    let mut replaced = Vec::with_capacity(captures.len());
    for (i, capture) in captures.iter().enumerate() {
        if let Err(error) = capture.install(outbox).await {
            for done in captures[..i].iter().rev() {
                let undone = match previous(done).and_then(|s| s.declaration.clone()) {
                    Some(declaration) => declaration.install(outbox).await,
                    None => done.uninstall(outbox).await.map(|_| ()),
                };
                if let Err(e) = undone {
                    tracing::error!(
                        table = %name_of(done),
                        error = &e as &dyn std::error::Error,
                        "could not put back the capture installed before"
                    );
                }
            }
            if matches!(&error, hare_outbox::Error::Configuration(m) if m.starts_with("outbox table") && m.contains("does not exist"))
            {
                return Err(usage(format!(
                    "{error}; with this command: `hare-outbox migrate` first, or `hare-outbox capture install --migrate`"
                )));
            }
            return Err(anyhow::Error::new(error).context(format!(
                "installing the capture of {} failed; no capture was changed",
                name_of(capture)
            )));
        }
        replaced.push(previous(capture).is_some());
    }
    Ok(replaced)
}

/// `hare-outbox capture uninstall [--only TABLE]…`.
///
/// # Errors
/// A usage error when neither the config nor `--only` names a table; a run-time error when the
/// database fails.
pub async fn uninstall(settings: &Settings, args: &UninstallArgs) -> anyhow::Result<()> {
    let targets: Vec<ChangeCapture> = if args.tables.is_empty() {
        configured(settings)
            .map_err(|_| {
                usage("no [[capture]] entries in the config; name the tables with --only TABLE")
            })?
            .to_vec()
    } else {
        let mut targets = Vec::new();
        for name in &args.tables {
            if name.trim().is_empty() {
                return Err(usage("--only needs a table name, `name` or `schema.name`"));
            }
            let found = settings
                .captures
                .iter()
                .find(|c| c.table == *name || name_of(c) == *name);
            targets.push(match found {
                Some(capture) => capture.clone(),
                None => match name.split_once('.') {
                    Some((schema, table)) => ChangeCapture::new(table).with_schema(schema),
                    None => ChangeCapture::new(name.clone()),
                },
            });
        }
        targets
    };
    let db = Db::connect(settings.database()?).await?;
    with_backend!(db, backend => {
        let outbox = Outbox::new(backend, settings.table.clone());
        for capture in &targets {
            let was = capture
                .uninstall(&outbox)
                .await
                .with_context(|| format!("uninstalling the capture of {}", name_of(capture)))?;
            if was {
                println!("capture {}: uninstalled", name_of(capture));
            } else {
                println!("capture {}: was not installed", name_of(capture));
            }
        }
    });
    Ok(())
}

/// `hare-outbox capture status`.
///
/// # Errors
/// [`DriftFound`] (exit 3) when a configured capture is missing or drifted, or an installed one
/// is not in the config; a run-time error when the database fails.
pub async fn status(settings: &Settings) -> anyhow::Result<()> {
    let db = Db::connect(settings.database()?).await?;
    let problems = with_backend!(db, backend => {
        status_on(&Outbox::new(backend, settings.table.clone()), &settings.captures).await
    })?;
    if problems > 0 {
        return Err(anyhow::Error::new(DriftFound(format!(
            "{problems} capture(s) differ from the config; `hare-outbox capture install` brings them in line"
        ))));
    }
    Ok(())
}

async fn status_on<B: CaptureBackend>(
    outbox: &Outbox<B>,
    captures: &[ChangeCapture],
) -> anyhow::Result<usize> {
    let installed = outbox
        .capture_status()
        .await
        .context("reading the installed captures")?;
    let mut problems = 0;
    for capture in captures {
        let name = name_of(capture);
        let status = capture
            .status(outbox)
            .await
            .with_context(|| format!("reading the capture of {name}"))?;
        match status {
            None => {
                problems += 1;
                println!("capture {name}: not installed");
            }
            Some(status) if status.is_current() => {
                println!("capture {name}: installed, up to date");
            }
            Some(status) => {
                problems += 1;
                println!("capture {name}: installed, drifted");
                for drift in &status.drift {
                    println!("  - {drift}");
                }
            }
        }
    }
    for status in installed
        .iter()
        .filter(|s| !captures.iter().any(|c| same_table(c, s)))
    {
        problems += 1;
        println!(
            "capture {}: installed, not in the config",
            status_name(status)
        );
        for drift in &status.drift {
            println!("  - {drift}");
        }
    }
    Ok(problems)
}
