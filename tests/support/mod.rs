pub mod fixture;
