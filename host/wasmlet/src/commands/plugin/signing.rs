//! `wasmlet plugin generate-key-pair | sign | verify`: cosign's key pairs and
//! signatures for plugin components, in a registry or beside a file.

use std::io::IsTerminal as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use wasmlet_signing::keyless::{Identity, Keyless};
use wasmlet_signing::{Registry, Verification, Verifier, keys};

/// Arguments of `wasmlet plugin generate-key-pair`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The files' prefix: PREFIX.key and PREFIX.pub.
    #[arg(long, default_value = "cosign")]
    pub output_key_prefix: PathBuf,
}

/// Where a signature goes or comes from.
#[derive(Debug, Args)]
pub struct Target {
    /// A pushed component (`oci://REGISTRY/REPO:TAG`) or a component file.
    pub target: String,
    #[command(flatten)]
    pub registry: super::RegistryArgs,
    /// For a file: its signature file (default FILE.sig).
    #[arg(long)]
    pub signature: Option<PathBuf>,
}

/// Arguments of `wasmlet plugin sign`.
#[derive(Debug, Args)]
pub struct SignArgs {
    #[command(flatten)]
    pub target: Target,
    /// The private key (cosign's, encrypted with `COSIGN_PASSWORD`).
    #[arg(long)]
    pub key: PathBuf,
}

/// Arguments of `wasmlet plugin verify`: keys, or a keyless identity (cosign's flag
/// names), or both.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub target: Target,
    /// A public key the component may be signed with (repeatable: any of them).
    #[arg(long, required_unless_present = "trusted_root")]
    pub key: Vec<PathBuf>,
    /// Keyless: Sigstore's trusted root file (trusted_root.json) certificates and log
    /// entries are checked against, offline.
    #[arg(long, requires = "identity", requires = "issuer")]
    pub trusted_root: Option<PathBuf>,
    /// Keyless: the signer the certificate must name (an email or a URI).
    #[arg(long, group = "identity", requires = "trusted_root")]
    pub certificate_identity: Option<String>,
    /// Keyless: a regular expression the certificate's signer must match whole.
    #[arg(long, group = "identity", requires = "trusted_root")]
    pub certificate_identity_regexp: Option<String>,
    /// Keyless: the OpenID Connect issuer the certificate must name.
    #[arg(long, group = "issuer", requires = "trusted_root")]
    pub certificate_oidc_issuer: Option<String>,
    /// Keyless: a regular expression the certificate's issuer must match whole.
    #[arg(long, group = "issuer", requires = "trusted_root")]
    pub certificate_oidc_issuer_regexp: Option<String>,
}

impl VerifyArgs {
    /// The verification these flags ask for; the error names the flag.
    fn verification(&self) -> Result<Verification> {
        let absolute = |flag: &str, p: &Path| {
            std::path::absolute(p).with_context(|| format!("--{flag}: {}", p.display()))
        };
        let public_keys = self
            .key
            .iter()
            .map(|k| absolute("key", k))
            .collect::<Result<Vec<_>>>()?;
        let keyless = match &self.trusted_root {
            Some(root) => Some(Keyless {
                trusted_root: absolute("trusted-root", root)?,
                identities: vec![Identity {
                    issuer: self.certificate_oidc_issuer.clone(),
                    issuer_reg_exp: self.certificate_oidc_issuer_regexp.clone(),
                    subject: self.certificate_identity.clone(),
                    subject_reg_exp: self.certificate_identity_regexp.clone(),
                }],
            }),
            None => None,
        };
        Ok(Verification {
            public_keys,
            keyless,
            required: true,
        })
    }
}

/// The private key's password, from `COSIGN_PASSWORD` (empty when unset).
fn password() -> Vec<u8> {
    std::env::var(keys::PASSWORD_ENV)
        .unwrap_or_default()
        .into_bytes()
}

/// Whether `target` names a registry artifact rather than a file.
fn in_registry(target: &str) -> bool {
    target.starts_with("oci://") || !Path::new(target).exists()
}

impl Target {
    fn registry(&self) -> Result<Registry> {
        Ok(Registry {
            insecure: self.registry.insecure,
            credentials: self.registry.credentials()?,
        })
    }

    fn signature_file(&self) -> PathBuf {
        self.signature
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("{}.sig", self.target)))
    }
}

/// `wasmlet plugin generate-key-pair`.
pub fn generate(args: &GenerateArgs) -> Result<ExitCode> {
    if std::env::var_os(keys::PASSWORD_ENV).is_none() && std::io::stdin().is_terminal() {
        eprintln!(
            "{} is not set: the private key is encrypted with an empty password",
            keys::PASSWORD_ENV
        );
    }
    let (private, public) = keys::generate(&password())?;
    let prefix = args.output_key_prefix.display();
    let (key, pub_file) = (format!("{prefix}.key"), format!("{prefix}.pub"));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&key)
        .and_then(|mut f| std::io::Write::write_all(&mut f, private.as_bytes()))
        .with_context(|| format!("writing {key} (an existing key is never overwritten)"))?;
    std::fs::write(&pub_file, &public).with_context(|| format!("writing {pub_file}"))?;
    println!("private key: {key}");
    println!("public key:  {pub_file}");
    Ok(ExitCode::SUCCESS)
}

/// `wasmlet plugin sign`.
pub async fn sign(args: SignArgs) -> Result<ExitCode> {
    let pem = std::fs::read(&args.key).with_context(|| format!("--key: {}", args.key.display()))?;
    let signer = keys::signer(&pem, &password())
        .map_err(|e| anyhow::anyhow!("--key: {}: {e}", args.key.display()))?;
    let target = &args.target;
    if in_registry(&target.target) {
        let signed = target
            .registry()?
            .sign(&target.target, &signer)
            .await
            .map_err(anyhow::Error::msg)?;
        println!("signed:    {}@{}", target.target, signed.manifest_digest);
        println!("signature: {}", signed.signature);
        return Ok(ExitCode::SUCCESS);
    }
    let bytes =
        std::fs::read(&target.target).with_context(|| format!("reading {}", target.target))?;
    let signature = keys::sign_blob(&signer, &bytes)?;
    let file = target.signature_file();
    std::fs::write(&file, format!("{signature}\n"))
        .with_context(|| format!("writing {}", file.display()))?;
    println!("signed:    {}", target.target);
    println!("signature: {}", file.display());
    Ok(ExitCode::SUCCESS)
}

/// Names the flag of a verification error (`publicKeys: …` → `--key: …`).
fn flag_error(e: &wasmlet_signing::ConfigError) -> anyhow::Error {
    let flag = match e.field.as_str() {
        "publicKeys" => "--key",
        "keyless.trustedRoot" => "--trusted-root",
        "keyless.identities[0].subjectRegExp" => "--certificate-identity-regexp",
        "keyless.identities[0].issuerRegExp" => "--certificate-oidc-issuer-regexp",
        _ => return anyhow::anyhow!("{e}"),
    };
    anyhow::anyhow!("{flag}: {}", e.message)
}

/// `wasmlet plugin verify`: 0 when one of the keys or the keyless identity signed the
/// target, 3 when none did.
pub async fn verify(args: VerifyArgs) -> Result<ExitCode> {
    let verifier = Verifier::load(&args.verification()?)
        .map_err(|e| flag_error(&e))?
        .context("--key: no key")?;
    let target = &args.target;
    let result = if in_registry(&target.target) {
        let text = target.target.trim_start_matches("oci://");
        let reference: wasmlet_signing::oci_client::Reference = text
            .parse()
            .with_context(|| format!("{text}: not an OCI reference"))?;
        let (client, auth) = target.registry()?.oci();
        let digest = client
            .fetch_manifest_digest(&reference, &auth)
            .await
            .with_context(|| text.to_owned())?;
        let repository = format!("{}/{}", reference.registry(), reference.repository());
        verifier
            .verify_artifact(&client, &auth, &reference, &digest)
            .await
            .map(|v| (v, format!("{repository}@{digest}")))
    } else {
        let bytes =
            std::fs::read(&target.target).with_context(|| format!("reading {}", target.target))?;
        let file = target.signature_file();
        let signature = std::fs::read_to_string(&file)
            .with_context(|| format!("reading the signature {}", file.display()))?;
        verifier
            .verify_blob(&bytes, &signature)
            .map(|v| (v, target.target.clone()))
    };
    match result {
        Ok((verified, what)) => {
            println!(
                "verified: {what} signed by {}",
                wasmlet_signing::describe_signer(&verified.signer)
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            println!("refused: {e}");
            Ok(ExitCode::from(3))
        }
    }
}
